"""Host-side Arrow/NumPy helpers every backend may use (no numba, no CuPy, no plan logic)."""
