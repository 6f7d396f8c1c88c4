"""Isolation canary: what a pod of a pool actually sees of the GPU, as one JSON report.

Runs on a GPU node inside a pod shaped like a tenant's (docs/attestation.md), or by hand on any
machine: ``python3 canary.py --expect-memory-mib 10240``. Standard library only (NVML and the CUDA
driver API through ctypes), so the image needs nothing but a Python runtime and the node's driver
libraries, which NVIDIA's container runtime mounts into GPU containers.

It measures, in this process and then again in a child process that changes the variables a
tenant's own program could change (the admission guard sees the pod's spec, never what its program
does once it runs):

- NVML: driver version, devices, their memory and MIG mode;
- CUDA: visible devices, each one's total memory (``cuDeviceTotalMem``, which HAMi-core and MIG
  answer with the cap or the slice), and ``cuMemGetInfo`` of the first device;
- whether allocating past the expected memory (in chunks) is refused, and how much was allocated;
- with ``--measure-compute``, the share of the GPU's SMs the process gets: a kernel that spins a fixed
  number of clock cycles on every SM is launched again and again, and the time it should take on the
  whole GPU (cycles / the device's clock) is divided by the time it took (HAMi-core's SM limit delays
  launches, so a capped process sees about its percent). Written from NVIDIA's driver API documentation
  and not yet run on a GPU (docs/attestation.md).

The report goes to stdout and to the termination message file, where the operator reads it
(Kubernetes keeps at most 4096 bytes of it, so the report is compact).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

REPORT_VERSION = 1
MIB = 1 << 20
CHUNK_MIB = 512
TERMINATION_LOG = "/dev/termination-log"
FORBIDDEN_OVERRIDES = {
    "CUDA_DEVICE_MEMORY_LIMIT": None, "CUDA_DEVICE_MEMORY_LIMIT_0": None, "CUDA_DEVICE_SM_LIMIT": None,
    "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/canary-forbidden.cache",
    "CUDA_DISABLE_CONTROL": "true", "GPU_CORE_UTILIZATION_POLICY": "disable", "LD_PRELOAD": None,
    "CUDA_VISIBLE_DEVICES": None, "NVIDIA_VISIBLE_DEVICES": "all",
}
"""What the child probe changes: HAMi-core's caps and switch unset or turned off, a shared region of its
own (HAMi-core takes a container's limits from the process that creates the region), the preload and any
narrowing of visible devices removed, NVIDIA's visibility widened (None: unset)."""
SPIN_PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
SPIN:
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra SPIN;
    ret;
}
"""
"""One block per SM spins `cycles` SM clock cycles: reading %clock64 keeps the loop from being optimised away."""
CLOCK_RATE_KHZ, MULTIPROCESSOR_COUNT = 13, 16
"""CUdevice_attribute values: CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT."""
KERNEL_SECONDS = 0.002
LAUNCHES = 250
"""250 kernels of 2 ms: half a second on a whole GPU, two at a 25% SM limit."""
REPORTED_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_LIMIT",
                "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD")
LIBRARY_DIRS = ("", "/usr/lib/x86_64-linux-gnu/", "/usr/lib64/", "/usr/local/nvidia/lib64/",
                "/usr/lib/wsl/lib/")


def _load(name: str) -> ctypes.CDLL:
    """The library by soname, else from the directories NVIDIA's runtime mounts it into."""
    errors = []
    for directory in LIBRARY_DIRS:
        try:
            return ctypes.CDLL(directory + name)
        except OSError as error:
            errors.append(str(error))
    raise OSError(errors[0])


def nvml_view() -> dict:
    """Driver version and the devices NVML lists, with their memory and MIG mode."""
    try:
        nvml = _load("libnvidia-ml.so.1")
    except OSError as error:
        return {"ok": False, "error": f"libnvidia-ml.so.1 not loadable: {error}"[:200]}
    code = nvml.nvmlInit_v2()
    if code:
        return {"ok": False, "error": f"nvmlInit_v2 returned {code}"}
    try:
        version = ctypes.create_string_buffer(96)
        nvml.nvmlSystemGetDriverVersion(version, 96)
        count = ctypes.c_uint()
        nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        devices = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)):
                continue
            name = ctypes.create_string_buffer(96)
            nvml.nvmlDeviceGetName(handle, name, 96)
            memory = (ctypes.c_ulonglong * 3)()
            memory_code = nvml.nvmlDeviceGetMemoryInfo(handle, memory)
            current, pending = ctypes.c_uint(), ctypes.c_uint()
            mig_code = nvml.nvmlDeviceGetMigMode(handle, ctypes.byref(current), ctypes.byref(pending))
            devices.append({"name": name.value.decode(errors="replace"),
                            "memoryMiB": None if memory_code else memory[0] // MIB,
                            "mig": None if mig_code else bool(current.value)})
        return {"ok": True, "driver": version.value.decode(errors="replace"), "devices": devices}
    finally:
        nvml.nvmlShutdown()


class Cuda:
    """The few CUDA driver API calls the canary needs."""

    def __init__(self) -> None:
        self.lib = _load("libcuda.so.1")

    def check(self, code: int, call: str) -> None:
        if code:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(code, ctypes.byref(name))
            raise RuntimeError(f"{call}: {(name.value or b'').decode() or code}")


def cuda_view(over_mib: int | None, measure_compute: bool = False) -> dict:
    """Visible devices and their memory; with `over_mib`, allocate in chunks up to that many MiB on
    the first device and say whether the driver (or a cap) refused before."""
    try:
        cuda = Cuda()
    except OSError as error:
        return {"ok": False, "error": f"libcuda.so.1 not loadable: {error}"[:200]}
    lib = cuda.lib
    try:
        cuda.check(lib.cuInit(0), "cuInit")
        count = ctypes.c_int()
        cuda.check(lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        devices = []
        for index in range(count.value):
            device = ctypes.c_int()
            cuda.check(lib.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
            name = ctypes.create_string_buffer(96)
            lib.cuDeviceGetName(name, 96, device)
            total = ctypes.c_size_t()
            cuda.check(lib.cuDeviceTotalMem_v2(ctypes.byref(total), device), "cuDeviceTotalMem")
            devices.append({"name": name.value.decode(errors="replace"), "totalMiB": total.value // MIB})
        view: dict = {"ok": True, "devices": devices}
        if devices:
            view.update(_first_device(cuda, over_mib, measure_compute))
        return view
    except RuntimeError as error:
        return {"ok": False, "error": str(error)[:200]}


def _first_device(cuda: Cuda, over_mib: int | None, measure_compute: bool = False) -> dict:
    lib = cuda.lib
    device, context = ctypes.c_int(), ctypes.c_void_p()
    cuda.check(lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    cuda.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    cuda.check(lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.check(lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    view: dict = {"memInfoMiB": {"free": free.value // MIB, "total": total.value // MIB}}
    if over_mib:
        view["overCap"] = _allocate_past(cuda, over_mib)
    if measure_compute:
        view["compute"] = _compute_share(cuda, device)
    lib.cuDevicePrimaryCtxRelease_v2(device)
    return view


def _allocate_past(cuda: Cuda, target_mib: int) -> dict:
    """Allocate CHUNK_MIB pieces until `target_mib` are held or an allocation is refused."""
    lib, held, allocated = cuda.lib, [], 0
    refusal = None
    while allocated < target_mib:
        size = min(CHUNK_MIB, target_mib - allocated)
        pointer = ctypes.c_uint64()
        code = lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size * MIB))
        if code:
            name = ctypes.c_char_p()
            lib.cuGetErrorName(code, ctypes.byref(name))
            refusal = (name.value or b"").decode() or str(code)
            break
        held.append(pointer)
        allocated += size
    for pointer in held:
        lib.cuMemFree_v2(pointer)
    return {"targetMiB": target_mib, "allocatedMiB": allocated, "refused": refusal is not None, "error": refusal}


def _compute_share(cuda: Cuda, device: ctypes.c_int) -> dict:
    """Launch the spin kernel LAUNCHES times, one at a time, and compare with the whole GPU's time."""
    lib = cuda.lib
    clock_khz, sms = ctypes.c_int(), ctypes.c_int()
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        cuda.check(lib.cuDeviceGetAttribute(ctypes.byref(clock_khz), CLOCK_RATE_KHZ, device), "cuDeviceGetAttribute")
        cuda.check(lib.cuDeviceGetAttribute(ctypes.byref(sms), MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute")
        cuda.check(lib.cuModuleLoadData(ctypes.byref(module), SPIN_PTX), "cuModuleLoadData")
        cuda.check(lib.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "cuModuleGetFunction")
        cycles = ctypes.c_uint64(int(clock_khz.value * 1000 * KERNEL_SECONDS))
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(cycles), ctypes.c_void_p))
        start = time.perf_counter()
        for _ in range(LAUNCHES):
            cuda.check(lib.cuLaunchKernel(function, sms.value, 1, 1, 32, 1, 1, 0, None, params, None), "cuLaunchKernel")
            cuda.check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        elapsed = time.perf_counter() - start
    except RuntimeError as error:
        return {"error": str(error)[:120]}
    finally:
        if module.value:
            lib.cuModuleUnload(module)
    ideal = LAUNCHES * cycles.value / (clock_khz.value * 1000)
    return {"seconds": round(elapsed, 4), "wholeGpuSeconds": round(ideal, 4), "share": round(ideal / elapsed, 3)}


def probe(over_mib: int | None, measure_compute: bool = False) -> dict:
    return {"nvml": nvml_view(), "cuda": cuda_view(over_mib, measure_compute),
            "env": {name: os.environ[name] for name in REPORTED_ENV if name in os.environ}}


def forbidden_probe(over_mib: int | None, measure_compute: bool = False, timeout: float = 120) -> dict:
    """The same probe in a child process whose environment a tenant's program could have made."""
    env = {key: value for key, value in os.environ.items() if key not in FORBIDDEN_OVERRIDES}
    env.update({key: value for key, value in FORBIDDEN_OVERRIDES.items() if value is not None})
    command = [sys.executable, os.path.abspath(__file__), "--probe-only"]
    if over_mib:
        command += ["--over-cap-mib", str(over_mib)]
    if measure_compute:
        command.append("--measure-compute")
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        result = json.loads(done.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as error:
        return {"error": f"child probe failed: {error}"[:200]}
    result.pop("env", None)
    result["changed"] = sorted(FORBIDDEN_OVERRIDES)
    return result


def compact(report: dict, limit: int = 4000) -> str:
    """JSON within the termination message's limit: NVML's device list is dropped first."""
    text = json.dumps(report, separators=(",", ":"), sort_keys=True)
    if len(text) > limit:
        for part in (report, report.get("forbidden") or {}):
            if isinstance(part.get("nvml"), dict):
                part["nvml"].pop("devices", None)
        text = json.dumps(report, separators=(",", ":"), sort_keys=True)
    return text


def allocation_target(expect_mib: int | None, over_mib: int) -> int | None:
    """MiB to try to allocate: past the expected memory by `over_mib`; None (allocate nothing)
    without an expectation or when `over_mib` is 0."""
    return expect_mib + over_mib if expect_mib and over_mib > 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect-memory-mib", type=int, default=None,
                        help="memory the pool promises one device; allocation is tried up to this plus --over-mib")
    parser.add_argument("--over-mib", type=int, default=1024,
                        help="how far past the expected memory to allocate; 0: allocate nothing")
    parser.add_argument("--over-cap-mib", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-forbidden", action="store_true", help="skip the child probe with changed variables")
    parser.add_argument("--measure-compute", action="store_true",
                        help="measure the share of the GPU's SMs this process gets (a timed kernel loop)")
    parser.add_argument("--termination-log", default=TERMINATION_LOG)
    args = parser.parse_args(argv)
    if args.probe_only:
        print(json.dumps(probe(args.over_cap_mib, args.measure_compute)))
        return 0
    over = allocation_target(args.expect_memory_mib, args.over_mib)
    report = {"canary": REPORT_VERSION, "expectMemoryMiB": args.expect_memory_mib,
              **probe(over, args.measure_compute)}
    if not args.no_forbidden:
        report["forbidden"] = forbidden_probe(over, args.measure_compute)
    text = compact(report)
    print(text)
    if args.termination_log and os.path.exists(os.path.dirname(args.termination_log) or "."):
        try:
            with open(args.termination_log, "w") as log:
                log.write(text)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
