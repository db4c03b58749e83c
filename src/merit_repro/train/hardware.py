"""Peak throughput of common accelerators, for model FLOPs utilisation (MFU).

Dense bf16 tensor-core peaks (no sparsity) from NVIDIA's datasheets, by a substring of the name
``torch.cuda.get_device_name`` reports; the first match wins, so the more specific names come first.
A cell's ``peak_flops`` overrides the table (for a GPU missing here, or a clock-limited one).
"""

import platform

import torch

PEAK_BF16_FLOPS = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),          # SXM
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("RTX 6000 Ada", 364e12),
    ("RTX 4090", 165e12),
]


def peak_flops(device_name, override=None):
    """Peak FLOP/s of one device: the override, else the table's entry for its name, else None (unknown)."""
    if override:
        return float(override)
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def mfu(tokens_per_s, flops_per_token, peak, devices=1):
    """Model FLOPs utilisation: achieved training FLOP/s over the devices' peak (None when the peak is unknown)."""
    if not peak or not tokens_per_s:
        return None
    return tokens_per_s * flops_per_token / (peak * devices)


def describe_device(device):
    """The device in one line, for logs and summaries."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda:{device.index or 0} {props.name} ({props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
    return f"cpu {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
