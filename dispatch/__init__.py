"""``prep dispatch`` and ``prep verify``: per-part CSC, halo, features and partition book,
delivered to machines or fsspec URLs and checked by fingerprints."""

if __name__ != "graphprep.dispatch":  # the bare folder name, e.g. from the repository root
    raise ImportError(f"import graphprep.dispatch, not {__name__}: graphprep installs one package, "
                      "graphprep (pip install -e . in the repository)")
