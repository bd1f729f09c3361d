"""Input checks of both twins: one wording, and one definition of the shape rules.

``RealmRuntime`` checks numpy arrays, ``RealmAdapter`` torch tensors; what is a matter of
shapes is checked here for both, and every refusal of either is worded here, so that a bad
batch reads the same whichever twin refuses it. A refused batch changes nothing.
"""

from __future__ import annotations


def check_input_shape(
    shape: tuple[int, ...],
    sample_shape: tuple[int | None, ...] | None,
    batch: int | None = None,
) -> None:
    """Rank, per-sample size and batch of an input's shape.

    Args:
        shape: the input's shape, ``(B, *sample)``.
        sample_shape: the expected per-sample shape; ``None`` entries (or ``None``) are not
            checked.
        batch: the only batch size accepted (artifacts exported for a fixed batch), or None.

    Raises:
        ValueError: wrong rank, channel count or size, empty batch, or another batch size.
    """
    if sample_shape is not None:
        want_rank = len(sample_shape) + 1
        if len(shape) != want_rank:
            raise ValueError(
                f"input must have rank {want_rank} {_expected(sample_shape)}, got shape {shape}"
            )
        for axis, (got, want) in enumerate(zip(shape[1:], sample_shape, strict=True), 1):
            if want is not None and got != want:
                what = "channel count" if axis == 1 else f"size of axis {axis}"
                raise ValueError(
                    f"input {what} must be {want}, got {got} "
                    f"(shape {shape}, expected {_expected(sample_shape)})"
                )
    if len(shape) == 0 or shape[0] == 0:
        raise ValueError(f"input batch is empty (shape {shape})")
    if batch is not None and shape[0] != batch:
        raise ValueError(
            f"input batch must be {batch}, got {shape[0]}: these artifacts were exported "
            f"for batch {batch}"
        )


def input_type_error(x: object, expected: str) -> ValueError:
    """The error for an input that is not the twin's array type (``expected``)."""
    return ValueError(f"input must be a {expected}, got {type(x).__name__}")


def input_dtype_error(dtype: object, expected: str) -> ValueError:
    """The error for an input of another dtype than ``expected``."""
    return ValueError(f"input dtype must be {expected}, got {dtype}")


def input_nonfinite_error(n_nan: int, n_inf: int) -> ValueError:
    """The error for an input with NaN or Inf values."""
    return ValueError(f"input contains non-finite values ({n_nan} NaN, {n_inf} Inf)")


def _expected(sample_shape: tuple[int | None, ...]) -> str:
    return "(batch, " + ", ".join(str(d) if d is not None else "*" for d in sample_shape) + ")"
