"""The sparse matrix types XGBoost checks inputs against: none of the benchmark's data is one."""


class spmatrix:  # noqa: N801 - SciPy's names
    """No object is an instance: every ``isinstance`` check XGBoost makes is False."""

    def __init__(self, *args, **kwargs):
        raise ImportError("scipy.sparse is a stand-in here (bench/gpu_shims): install SciPy")


class csr_matrix(spmatrix):  # noqa: N801
    pass


class csc_matrix(spmatrix):  # noqa: N801
    pass


class coo_matrix(spmatrix):  # noqa: N801
    pass


class csr_array(csr_matrix):  # noqa: N801
    pass


class csc_array(csc_matrix):  # noqa: N801
    pass


class coo_array(coo_matrix):  # noqa: N801
    pass


def issparse(value) -> bool:
    return isinstance(value, spmatrix)


def vstack(*args, **kwargs):
    raise ImportError("scipy.sparse is a stand-in here (bench/gpu_shims): install SciPy")
