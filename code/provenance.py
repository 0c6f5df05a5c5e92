"""Machine facts that every lab writes into its --json, so a page can say where it ran."""

import os
import platform
import subprocess
import sys


def cpu_model():
    """The CPU's marketing name (Linux /proc/cpuinfo, else what platform knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts(torch_version=None):
    """Versions and hardware of this run, as plain JSON-ready values.

    The build passes torch's version (it reads it from the package metadata) so that it need
    not import torch itself; a lab passes nothing and reports the torch it runs.
    """
    if torch_version is None:
        import torch  # imported here so callers that only validate arguments stay fast

        torch_version = torch.__version__
    return {
        "torch": torch_version,
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
    }


def gpu_facts():
    """The GPU and the software that drives it, for the page's provenance (None without
    one). Imports torch: a GPU run's recording pays for it, a build never asks."""
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    nccl = torch.cuda.nccl.version()
    return {
        "model": torch.cuda.get_device_name(device),
        "count": torch.cuda.device_count(),
        "capability": f"{props.major}.{props.minor}",
        "memory_GiB": round(props.total_memory / 2**30, 1),
        "driver": nvidia_driver(),
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
    }


def nvidia_driver():
    """The NVIDIA driver version from nvidia-smi, or None where it cannot be asked."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None
