"""A reference for the Atoms page's top items (tests only): one atom's top items computed directly from a
codes matrix, the independent computation :func:`slics_core.explorer.atom_tables.codes_top_items` and
:func:`~slics_core.explorer.atom_tables.stream_atom_top_items` are compared with."""
import numpy as np
import pandas as pd

from slics_core.analysis import codes_and_atom


def atom_top_items(codes, atom, k=12, rows=None):
    """The items with the largest coefficient on one atom.

    Parameters
    ----------
    codes : array-like of shape (n, M)
        Coefficients (:func:`item_codes`).
    atom : int
    k : int
    rows : array-like of int, optional
        Workspace row of each line of ``codes`` (default ``0..n-1``).

    Returns
    -------
    table : DataFrame
        ``rank`` (1 = largest), ``row``, ``coefficient``; only items with a
        positive coefficient, at most ``k``; ties by row order.
    """
    codes, atom = codes_and_atom(codes, atom)
    rows = np.arange(codes.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    if rows.shape != (codes.shape[0],):
        raise ValueError(f"rows must have one entry per line of codes ({codes.shape[0]}).")
    c = codes[:, atom]
    order = np.lexsort((np.arange(c.size), -c))
    order = order[c[order] > 0][: int(k)]
    return pd.DataFrame({"rank": np.arange(1, order.size + 1), "row": rows[order], "coefficient": c[order]})
