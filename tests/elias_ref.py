"""Independent reference for the Elias-omega tests (no package helpers)."""


def omega_string(n: int) -> str:
    """Elias-omega code of n ≥ 1 as a '0'/'1' string, first bit first: R(n)·'0' with R(1) empty
    and R(n) = R(⌊log₂n⌋)·binary(n) (Elias 1975)."""
    code = "0"
    while n > 1:
        b = bin(n)[2:]
        code = b + code
        n = len(b) - 1
    return code
