"""Forwards TCP from an address inside the node's network namespace to the API server on the
host's 127.0.0.1: `python -m kubeplane.apiforward NETNS_PATH LISTEN_IP LISTEN_PORT TARGET_PORT`.

The API server keeps listening on loopback only; the kubelet, kube-proxy and pods (through the
`kubernetes` Service, whose EndpointSlice names this address) reach it here. The listening socket
is made while the process is inside the node's namespace, and every outgoing connection after it
has returned to the host's, so one process joins both. TLS passes through untouched.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
import threading

_CLONE_NEWNET = 0x40000000


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def listen_in(netns_path: str, address: tuple[str, int]) -> socket.socket:
    """A listening socket bound inside `netns_path`; the calling process ends up back in its own
    network namespace."""
    own = f"/proc/{os.getpid()}/ns/net"
    home = os.open(own, os.O_RDONLY)
    try:
        _setns(netns_path)
        listener = socket.create_server(address, backlog=128)
    finally:
        if ctypes.CDLL(None, use_errno=True).setns(home, _CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "setns back to the host namespace")
        os.close(home)
    return listener


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(client: socket.socket, target_port: int) -> None:
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port), timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(argv: list[str]) -> None:
    netns_path, listen_ip, listen_port, target_port = argv
    listener = listen_in(netns_path, (listen_ip, int(listen_port)))
    print(f"forwarding {listen_ip}:{listen_port} in {netns_path} to 127.0.0.1:{target_port}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, int(target_port)), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
