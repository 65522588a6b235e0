"""What the host was doing while the GPU waited: host time by cause and by Python frame, graph
captures, expensive calls, the kernel and CPU-range summaries and the GPU's clock against the CPU's."""
