// Command spoofudp sends one UDP datagram whose IPv4 source address is SOURCE, not the sender's
// (`spoofudp send SOURCE DESTINATION PORT PAYLOAD`): it writes the IP header itself on a raw
// socket, which needs CAP_NET_RAW; and it receives datagrams (`spoofudp listen PORT`), printing
// each with the source address it came from (the test image's busybox has no UDP server). The
// tests run the sender in a tenant pod to show the admission guard took that capability away (the
// send fails with "operation not permitted") and, in a platform pod that keeps it, that such a
// datagram reaches its target through a NetworkPolicy that admits SOURCE. Exits 1 when a send or
// the listening socket fails.
package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

const usage = "usage: spoofudp send SOURCE DESTINATION PORT PAYLOAD | spoofudp listen PORT"

func main() {
	switch {
	case len(os.Args) == 6 && os.Args[1] == "send":
		source, destination := net.ParseIP(os.Args[2]).To4(), net.ParseIP(os.Args[3]).To4()
		port := parsePort(os.Args[4])
		if source == nil || destination == nil {
			fail(2, "SOURCE and DESTINATION are IPv4 addresses")
		}
		if err := send(source, destination, port, []byte(os.Args[5])); err != nil {
			fail(1, err.Error())
		}
		fmt.Printf("sent %d bytes from %s to %s:%d\n", len(os.Args[5]), source, destination, port)
	case len(os.Args) == 3 && os.Args[1] == "listen":
		if err := listen(parsePort(os.Args[2])); err != nil {
			fail(1, err.Error())
		}
	default:
		fail(2, usage)
	}
}

func parsePort(text string) uint16 {
	port, err := strconv.Atoi(text)
	if err != nil || port < 1 || port > 65535 {
		fail(2, "PORT is 1-65535")
	}
	return uint16(port)
}

func fail(code int, message string) {
	fmt.Fprintln(os.Stderr, "spoofudp:", message)
	os.Exit(code)
}

// listen prints "from SOURCE: PAYLOAD" for every datagram that reaches PORT, until killed.
func listen(port uint16) error {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{Port: int(port)})
	if err != nil {
		return err
	}
	buffer := make([]byte, 2048)
	for {
		n, from, err := conn.ReadFromUDP(buffer)
		if err != nil {
			return err
		}
		fmt.Printf("from %s: %s\n", from.IP, buffer[:n])
	}
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
