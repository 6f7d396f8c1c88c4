// Command spoofudp sends one UDP datagram whose IPv4 source address is SOURCE, not the sender's:
// it writes the IP header itself on a raw socket, which needs CAP_NET_RAW. The tests run it in a
// tenant pod to show the admission guard took that capability away (the send fails with
// "operation not permitted") and, in a platform pod that keeps it, that such a datagram would
// reach its target through a NetworkPolicy that admits SOURCE. Exits 1 when the send fails.
package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: spoofudp SOURCE DESTINATION PORT PAYLOAD")
		os.Exit(2)
	}
	source, destination := net.ParseIP(os.Args[1]).To4(), net.ParseIP(os.Args[2]).To4()
	port, err := strconv.Atoi(os.Args[3])
	if source == nil || destination == nil || err != nil || port < 1 || port > 65535 {
		fmt.Fprintln(os.Stderr, "spoofudp: SOURCE and DESTINATION are IPv4 addresses, PORT 1-65535")
		os.Exit(2)
	}
	if err := send(source, destination, uint16(port), []byte(os.Args[4])); err != nil {
		fmt.Fprintln(os.Stderr, "spoofudp:", err)
		os.Exit(1)
	}
	fmt.Printf("sent %d bytes from %s to %s:%d\n", len(os.Args[4]), source, destination, port)
}

func send(source, destination net.IP, port uint16, payload []byte) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	defer syscall.Close(fd)
	packet := datagram(source, destination, port, payload)
	var to syscall.SockaddrInet4
	copy(to.Addr[:], destination)
	if err := syscall.Sendto(fd, packet, 0, &to); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// datagram is an IPv4 header (the kernel fills in the checksum and total length of a raw
// IPPROTO_RAW send) and a UDP header without checksum (0: none, allowed over IPv4).
func datagram(source, destination net.IP, port uint16, payload []byte) []byte {
	const ipHeader, udpHeader = 20, 8
	packet := make([]byte, ipHeader+udpHeader+len(payload))
	packet[0] = 0x45 // version 4, header length 5 words
	binary.BigEndian.PutUint16(packet[2:], uint16(len(packet)))
	packet[8] = 64 // TTL
	packet[9] = syscall.IPPROTO_UDP
	copy(packet[12:16], source)
	copy(packet[16:20], destination)
	udp := packet[ipHeader:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpHeader+len(payload)))
	copy(udp[udpHeader:], payload)
	return packet
}
