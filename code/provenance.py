"""Machine facts that every lab writes into its --json, so a page can say where it ran."""

import os
import platform
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
