"""`python -m kubeplane up --dir DIR`: run a plane in the foreground until Ctrl-C or SIGTERM.

Tests attach to it with KUBEPLANE_DIR=DIR, which saves the plane's start on every pytest run.
"""

from __future__ import annotations

import argparse
import signal
import sys

from .plane import ControlPlane


def _stop_on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubeplane")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run a control plane until interrupted")
    up.add_argument("--dir", required=True, help="directory for the plane's certificates, "
                    "kubeconfigs, logs and etcd data (created if missing)")
    up.add_argument("--audit", action=argparse.BooleanOptionalAction, default=True,
                    help="write the apiserver audit log that tests count requests in")
    up.add_argument("--node", action="store_true",
                    help="also run kube-scheduler and a real node (containerd, kubelet, kube-proxy)")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    plane = ControlPlane(args.dir, audit=args.audit, node=args.node)
    try:
        plane.start()
        print(f"kubeplane: ready in {plane.start_seconds:.1f}s at {plane.api_url}", file=sys.stderr)
        print(f"  export KUBECONFIG={plane.kubeconfig_path}", file=sys.stderr)
        print(f"  export KUBEPLANE_DIR={plane.directory}   # pytest attaches to this plane",
              file=sys.stderr)
        print(plane.kubeconfig_path, flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
