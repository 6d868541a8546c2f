"""Inspection: every lane's registers at a chosen CUDA source line (stub, filled below)."""
def registers_at(*a, **k):
    raise NotImplementedError
register_table = plot_registers = registers_at
