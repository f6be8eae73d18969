"""gpu: the GPU as this pipeline needs to know it: NVML facts around a cell's window (nvml), the CUDA each lock needs
and the driver that runs it (cuda), peak FLOP/s by device name (peaks), and the host check before any job (preflight).

May import: ground, models."""
