"""Vendored data sets by name, the thesis' train/test split protocol, and (re-exported) simulators.

The files live in ``probmodels/data/`` (provenance per file in ``data/PROVENANCE.md``) and are read
with :mod:`importlib.resources`, so loading works from an installed package and never touches the
network. Everything returned is NumPy (float64 features, int64 labels in {-1, +1}) or, for the text
corpus, a SciPy CSR matrix.

``load(name)`` is the one entry point for every vendored set and always returns a pair ``(X, y)``:

- classification sets (``list_datasets("classification")``): ``X`` (n, d) float64, ``y`` in {-1, +1};
- microarray sets (colon, leukemia, srbct): as :func:`load_microarray` with ``preprocess=True``;
- unsupervised sets (faithful, geyser, galaxies): ``X`` (n, d) float64 (galaxies is (82, 1)), ``y=None``;
- ``"reuters"``: the (395, 4258) CSR document-term count matrix, ``y=None`` (tokens and titles via
  :func:`load_reuters`).

>>> from probmodels import datasets
>>> X, y = datasets.load("australian")
>>> X.shape, sorted(set(y.tolist()))
((690, 14), [-1, 1])
>>> split = datasets.split(X, y, train_size=100, seed=0)
>>> split.X_train.shape, split.X_test.shape
((100, 14), (590, 14))
"""

from __future__ import annotations

import functools
import io
import numbers
from importlib import resources
from typing import NamedTuple

import numpy as np
import scipy.sparse

from probmodels.simulate import (  # noqa: F401  (re-exported: datasets is the public home)
    GaussianHMMData,
    LDACorpus,
    MixtureData,
    PoissonHMMData,
    circle,
    gaussian_hmm,
    gaussian_mixture_data,
    lda_corpus,
    poisson_hmm,
    threenorm,
    twonorm,
)

__all__ = [
    "load",
    "load_microarray",
    "load_unsupervised",
    "load_reuters",
    "list_datasets",
    "split",
    "Split",
    "Corpus",
    "twonorm",
    "threenorm",
    "circle",
    "gaussian_hmm",
    "poisson_hmm",
    "gaussian_mixture_data",
    "lda_corpus",
]

CLASSIFICATION = (
    "australian", "boston", "breast", "crabs", "digits35",
    "german", "heart", "new_thyroid", "pima", "twonorm",
)  # fmt: skip
MICROARRAY = ("colon", "leukemia", "srbct")
UNSUPERVISED = ("faithful", "galaxies", "geyser")
TEXT = ("reuters",)
_KINDS = {"classification": CLASSIFICATION, "microarray": MICROARRAY, "unsupervised": UNSUPERVISED, "text": TEXT}
_SIMULATED = {"threenorm": "threenorm(n, seed)", "circle": "circle(n, flip_rate, seed)"}


class Corpus(NamedTuple):
    """A document-term corpus: ``counts`` CSR (documents x words, int64), ``tokens`` (vocabulary,
    word id i is ``tokens[i]``) and ``titles`` (one per document)."""

    counts: scipy.sparse.csr_matrix
    tokens: tuple[str, ...]
    titles: tuple[str, ...]


class Split(NamedTuple):
    """One random train/test split; features standardised with training statistics if asked."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


# --------------------------------------------------------------------------- names


def list_datasets(kind: str | None = None) -> list[str]:
    """Names accepted by :func:`load`, optionally only one ``kind``: ``"classification"``,
    ``"microarray"``, ``"unsupervised"`` or ``"text"``.

    >>> list_datasets("microarray")
    ['colon', 'leukemia', 'srbct']
    """
    if kind is None:
        return sorted(name for names in _KINDS.values() for name in names)
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {sorted(_KINDS)} or None, got {kind!r}")
    return list(_KINDS[kind])


def _check_name(name, valid) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name not in valid:
        hint = f" ({name} is simulated: use datasets.{_SIMULATED[name]})" if name in _SIMULATED else ""
        raise ValueError(f"unknown dataset name {name!r}{hint}; valid names: {', '.join(sorted(valid))}")
    return name


# --------------------------------------------------------------------------- raw file access


def _data_file(*parts: str):
    return resources.files("probmodels").joinpath("data", *parts)


@functools.lru_cache(maxsize=None)
def _read_csv(kind: str, name: str) -> tuple[tuple[str, ...], np.ndarray]:
    text = _data_file(kind, f"{name}.csv").read_text(encoding="utf-8")
    header, _, body = text.partition("\n")
    values = np.loadtxt(io.StringIO(body), delimiter=",", dtype=np.float64, ndmin=2)
    values.setflags(write=False)  # cached: callers get copies
    return tuple(header.strip().split(",")), values


@functools.lru_cache(maxsize=None)
def _read_npz(name: str) -> tuple[np.ndarray, np.ndarray]:
    with _data_file("microarray", f"{name}.npz").open("rb") as fh, np.load(fh) as npz:
        X, y = np.asarray(npz["X"]), np.asarray(npz["y"])
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


# --------------------------------------------------------------------------- loaders


def load(name: str):
    """Load a vendored data set by name; returns ``(X, y)`` (``y=None`` for unlabelled sets; see the
    module docstring for each kind's convention).

    >>> X, y = load("breast")
    >>> X.shape, X.dtype, y.dtype
    ((683, 9), dtype('float64'), dtype('int64'))
    """
    name = _check_name(name, list_datasets())
    if name in MICROARRAY:
        return load_microarray(name)
    if name in UNSUPERVISED:
        return load_unsupervised(name), None
    if name in TEXT:
        return load_reuters().counts, None
    columns, values = _read_csv("classification", name)
    label = columns.index("y")
    X = np.delete(values, label, axis=1)
    y = values[:, label].astype(np.int64)
    return X, y


def load_unsupervised(name: str) -> np.ndarray:
    """Load faithful (272 x 2: eruptions, waiting), geyser (299 x 2: waiting, duration; consecutive
    eruptions, in time order) or galaxies (82 x 1 velocities in km/s) as a float64 (n, d) array.

    >>> load_unsupervised("galaxies").shape
    (82, 1)
    """
    name = _check_name(name, UNSUPERVISED)
    return _read_csv("unsupervised", name)[1].copy()


def load_microarray(name: str, preprocess: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Load a gene-expression set as ``(X, y)``: ``X`` (patients x genes) float64, ``y`` in {-1, +1}.

    With ``preprocess=True`` (the usual pipelines; ``False`` gives the raw values as shipped):

    - ``colon`` (62 x 2000, tumour = +1): raw intensities, all positive -> ``log10``. The base is
      log10 to match the leukemia pipeline; it only rescales every gene by the same constant, which
      the per-feature standardisation of :func:`split` removes, so results do not depend on it.
    - ``leukemia`` (72 x 7129 raw, AML = +1), Dudoit, Fridlyand & Speed (2002): floor 100, ceiling
      16000, keep genes with max/min > 5 and max - min > 500, ``log10``, then standardise each array
      (row) to mean 0, variance 1 across genes, as Dudoit et al. do. This leaves 72 x 3571. The
      filter uses all 72 patients (the published pipeline), i.e. it is not re-fitted per split;
      it looks at intensity ranges only, never at labels.
    - ``srbct`` (43 x 2308, EWS = +1 vs RMS): already normalised; returned unchanged.

    >>> X, y = load_microarray("leukemia")
    >>> X.shape
    (72, 3571)
    """
    name = _check_name(name, MICROARRAY)
    if not isinstance(preprocess, bool):
        raise TypeError(f"preprocess must be a bool, got {type(preprocess).__name__}")
    X_raw, y_raw = _read_npz(name)
    X = X_raw.astype(np.float64)  # a fresh copy
    y = y_raw.astype(np.int64)
    if not preprocess or name == "srbct":
        return X, y
    if name == "colon":
        return np.log10(X), y
    X = np.clip(X, 100.0, 16000.0)
    high, low = X.max(axis=0), X.min(axis=0)
    X = np.log10(X[:, (high / low > 5.0) & (high - low > 500.0)])
    X = (X - X.mean(axis=1, keepdims=True)) / X.std(axis=1, keepdims=True)
    return X, y


@functools.lru_cache(maxsize=None)
def _read_reuters() -> Corpus:
    tokens = tuple(_data_file("text", "reuters.tokens").read_text(encoding="utf-8").splitlines())
    titles = []
    for i, line in enumerate(_data_file("text", "reuters.titles").read_text(encoding="utf-8").splitlines()):
        number, _, title = line.partition(" ")
        titles.append(title if number == str(i) else line)  # drop the shipped "<doc id> " prefix
    rows, cols, vals = [], [], []
    lines = _data_file("text", "reuters.ldac").read_text(encoding="utf-8").splitlines()
    for doc, line in enumerate(lines):
        fields = line.split()
        pairs = [field.split(":") for field in fields[1:]]
        if len(pairs) != int(fields[0]):
            raise ValueError(f"reuters.ldac line {doc}: header says {fields[0]} terms, found {len(pairs)}")
        rows.extend([doc] * len(pairs))
        cols.extend(int(word) for word, _ in pairs)
        vals.extend(int(count) for _, count in pairs)
    shape = (len(lines), len(tokens))
    counts = scipy.sparse.csr_matrix((np.array(vals, np.int64), (np.array(rows), np.array(cols))), shape=shape)
    return Corpus(counts, tokens, tuple(titles))


def load_reuters() -> Corpus:
    """The Reuters newswire subset shipped with the ``lda`` package: 395 documents, 4258 words.

    >>> corpus = load_reuters()
    >>> corpus.counts.shape, corpus.tokens[0], len(corpus.titles)
    ((395, 4258), 'church', 395)
    """
    corpus = _read_reuters()
    return Corpus(corpus.counts.copy(), corpus.tokens, corpus.titles)


# --------------------------------------------------------------------------- split protocol


def split(X, y, train_size, seed: int = 0, standardise: bool = True, *, test_size=None) -> Split:
    """Random train/test split, the thesis protocol (Table 6.3: e.g. 100 training points, the rest
    for testing; features standardised with the training part's mean and standard deviation).

    ``train_size`` is a number of rows (int, 1 <= train_size < n) or a fraction in (0, 1) (rounded,
    e.g. 2/3 for the microarray protocol); ``test_size`` (same forms, default: all remaining rows)
    caps the test part, e.g. twonorm's 1000. A training column with zero spread is centred but not
    scaled (it becomes 0 in training, finite in testing), never NaN.

    >>> X, y = twonorm(1100, seed=0)
    >>> s = split(X, y, train_size=100, seed=0)
    >>> s.X_train.shape, s.X_test.shape, round(float(s.X_train[:, 0].std()), 6)
    ((100, 20), (1000, 20), 1.0)
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D (n, d) array, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X must not contain NaN or inf")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must be a 1-D array with {X.shape[0]} entries (one per row of X), got shape {y.shape}")
    if not isinstance(standardise, bool):
        raise TypeError(f"standardise must be a bool, got {type(standardise).__name__}")
    n = X.shape[0]
    n_train = _size(train_size, "train_size", n, upper=n - 1)
    n_test = n - n_train if test_size is None else _size(test_size, "test_size", n, upper=n - n_train)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    perm = np.random.default_rng(int(seed)).permutation(n)
    train, test = perm[:n_train], perm[n_train : n_train + n_test]
    X_train, X_test = X[train], X[test]
    if standardise:
        mean, sd = X_train.mean(axis=0), X_train.std(axis=0)
        sd = np.where(sd > 1e-12 * np.maximum(np.abs(mean), 1.0), sd, 1.0)
        X_train, X_test = (X_train - mean) / sd, (X_test - mean) / sd
    return Split(X_train, y[train], X_test, y[test])


def _size(value, name: str, n: int, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an int or a fraction in (0, 1), got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        count = int(value)
    elif 0.0 < value < 1.0:
        count = int(round(value * n))
    else:
        raise ValueError(f"{name} as a fraction must lie in (0, 1), got {value}")
    if not 1 <= count <= upper:
        raise ValueError(f"{name} gives {count} rows but must be between 1 and {upper} for n = {n} rows")
    return count
