"""Labelled image collections: MS COCO, MIRFlickr25K, generic folders.

Every loader returns an :class:`ImageDataset` (image paths + ids, general
labels ``Y``, optional sub-labels ``Z`` with ``sub_to_concept``).

MS COCO
    ``instances_*.json`` + image folder. General labels: the 12
    supercategories (order of first appearance in the categories list:
    person, vehicle, outdoor, animal, accessory, sports, kitchen, food,
    furniture, electronic, appliance, indoor); sub-labels: the 80 categories.
MIRFlickr25K (official layout)
    ``mirflickr/im1.jpg .. im25000.jpg`` and the annotation folder
    (``mirflickr25k_annotations_v080``) of per-label ``<label>.txt`` files
    listing 1-based image numbers. :data:`MIRFLICKR_HIERARCHY` is the mapping
    used: 11 general concepts, 6 of them with sub-labels::

        animals: bird, dog          plant_life: flower, tree
        people: baby, female, male, portrait
        sky: clouds                 water: lake, river, sea
        transport: car              food, indoor, night, structures, sunset: none

    A general label is set when its own file lists the image *or* one of its
    sub-labels does. ``relevant_only=True`` reads the strict ``<label>_r1.txt``
    files instead (falls back to ``<label>.txt`` where there is none).
Generic folder
    Images under a folder plus a CSV or JSON label file (see
    :func:`load_folder`).
Precomputed embeddings
    ``.npy`` / ``.parquet`` files or clip-retrieval's ``img_emb/`` + ``metadata/``
    folders, with ids and labels (:func:`load_precomputed`); ``slics embed
    --dataset precomputed`` turns them into an embedding cache without re-embedding.

:func:`load_image` opens one image robustly (PNG named .jpg, CMYK, 16-bit,
palette/alpha, EXIF orientation); :func:`iter_images` loads many and
reports the ones that cannot be read instead of aborting.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from slics_core.errors import DamagedFileError, check_npy
from slics_core.extras import require

__all__ = [
    "ImageDataset",
    "ImageLoadError",
    "IMAGE_EXTENSIONS",
    "MIRFLICKR_HIERARCHY",
    "load_image",
    "iter_images",
    "load_coco",
    "load_mirflickr",
    "load_folder",
    "load_precomputed",
    "list_images",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")

#: MIRFlickr25K general concept -> finer labels (sub-labels), as used by the paper.
MIRFLICKR_HIERARCHY = {
    "animals": ["bird", "dog"],
    "food": [],
    "indoor": [],
    "night": [],
    "people": ["baby", "female", "male", "portrait"],
    "plant_life": ["flower", "tree"],
    "sky": ["clouds"],
    "structures": [],
    "sunset": [],
    "transport": ["car"],
    "water": ["lake", "river", "sea"],
}


class ImageLoadError(ValueError):
    """An image file that cannot be decoded."""


@dataclass
class ImageDataset:
    """A labelled image collection.

    Attributes
    ----------
    paths : list of str
    ids : list of str
        Stable identifiers (file name or dataset id).
    Y : ndarray of bool, shape (n, S)
    concept_names : list of str
    Z : ndarray of bool, shape (n, L), optional
    sub_names : list of str
    sub_to_concept : ndarray of int, shape (L,)
    name : str
    label_report : str or None
        How a separate label file was matched to the ids ("N of M label rows matched, K ids
        unlabelled"), when one was.
    """

    paths: list
    ids: list
    Y: np.ndarray
    concept_names: list
    Z: np.ndarray | None = None
    sub_names: list = field(default_factory=list)
    sub_to_concept: np.ndarray | None = None
    name: str = "dataset"
    label_report: str | None = None

    def __len__(self):
        return len(self.paths)

    def labels_dict(self):
        """Label arrays for :class:`slics_core.store.EmbeddingStore` (JSON/npz-friendly)."""
        out = {"Y": self.Y.astype(np.uint8), "concept_names": np.array(self.concept_names, dtype=str)}
        if self.Z is not None:
            out.update(Z=self.Z.astype(np.uint8), sub_names=np.array(self.sub_names, dtype=str),
                       sub_to_concept=np.asarray(self.sub_to_concept, dtype=np.int64))
        return out


# --------------------------------------------------------------------------- images
#: Peak bytes per decoded pixel by mode, measured (benchmarks/bench_uploads.py, docs/security.md) and
#: rounded up: the decoded frame (Pillow stores RGB in four bytes), its RGB conversion (16-bit and
#: float images through a float32 copy) and one more copy (EXIF rotation, resizing).
_BYTES_PER_PIXEL = {"1": 11, "L": 11, "P": 11, "I;16": 16, "I;16B": 16, "I;16L": 16, "I;16N": 16, "I": 18, "F": 18}
_DEFAULT_BYTES_PER_PIXEL = 14
#: libwebp decodes into a buffer of its own first.
_FORMAT_EXTRA = {"WEBP": 8}


def _jpeg_scale(size, max_side) -> int:
    """The DCT scale (1, 2, 4 or 8) a JPEG of ``size`` is decoded at for a result of ``max_side``."""
    s = 1
    while max_side is not None and s < 8 and max(size) / (2 * s) >= max_side:
        s *= 2
    return s


def _decode_cost(size, mode, fmt, max_side) -> int:
    """Bytes decoding an image of ``size`` and ``mode`` takes (an upper bound measured per mode and
    format): the decoded frame (at the reduced DCT scale of a JPEG), its RGB conversion and one more
    copy (EXIF rotation or resizing)."""
    w, h = size
    if fmt == "JPEG":
        s = _jpeg_scale(size, max_side)
        w, h = -(-w // s), -(-h // s)
    return w * h * (_BYTES_PER_PIXEL.get(mode, _DEFAULT_BYTES_PER_PIXEL) + _FORMAT_EXTRA.get(fmt, 0))


def load_image(path, *, max_pixels=200_000_000, draft=None, max_decode_bytes=None):
    """Open an image as 8-bit RGB, whatever its format quirks.

    Handles files whose extension lies about the format (PIL reads the
    content), CMYK / YCbCr / palette / grey / alpha images, 16-bit and
    32-bit integer or float images (scaled to 8 bit), and the EXIF
    orientation tag (the pixels are rotated and the tag is dropped).

    Parameters
    ----------
    path : path-like
    max_pixels : int
        Larger images are refused (decompression bombs).
    draft : int, optional
        Smallest side the caller needs (e.g. the model's resize target). A
        JPEG is then decoded at 1/2, 1/4 or 1/8 scale (PIL's
        :meth:`~PIL.Image.Image.draft`: the JPEG decoder skips the fine
        detail, so decoding and the later resize cost less) as long as both
        sides stay at least ``draft`` pixels; other formats are decoded at
        full size.
    max_decode_bytes : int, optional
        Refuse an image whose decoding would take more memory
        (:func:`_decode_cost`, judged from the header); the app passes one
        so a huge file in a shared workspace cannot exhaust the server.

    Raises
    ------
    ImageLoadError
        If the file is missing, not an image, truncated, or larger than
        ``max_pixels``.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = os.fspath(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                w, h = im.size
                if w * h > max_pixels:
                    raise ImageLoadError(f"{path}: {w}x{h} pixels is larger than the limit of {max_pixels}.")
                if draft and im.format == "JPEG":
                    im.draft("RGB", (int(draft), int(draft)))
                cost = _decode_cost(im.size, im.mode, im.format, None)  # (size after any draft)
                if max_decode_bytes is not None and cost > max_decode_bytes:
                    raise ImageLoadError(f"{path}: {w}x{h} pixels ({im.mode}, {im.format}) would take about "
                                         f"{cost / 2**20:.0f} MB to decode, over the {max_decode_bytes / 2**20:.0f} MB "
                                         "allowed here.")
                im.load()
                im = ImageOps.exif_transpose(im)
                return _to_rgb(im)
    except ImageLoadError:
        raise
    except FileNotFoundError:
        raise ImageLoadError(f"{path}: no such file.") from None
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ImageLoadError(f"{path}: not a readable image ({exc.__class__.__name__}).") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageLoadError(f"{path}: damaged image ({exc}).") from None


def _to_rgb(im):
    from PIL import Image

    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        # one float32 working copy, scaled in place (a 16-bit value never lands on a .5 tie: float32 is exact
        # enough); float64 temporaries cost 28 bytes a pixel, this 7
        arr = np.array(im, dtype=np.float32)  # a writable copy (an F image's own buffer is read-only)
        if mode == "F":
            lo, hi = float(arr.min()), float(arr.max())
            if hi > lo:
                arr -= lo
                arr *= 255.0 / (hi - lo)
            else:
                arr[:] = 0
        else:
            hi = 65535.0 if mode.startswith("I;16") or arr.max() > 255 else 255.0
            arr *= 255.0 / hi
        np.rint(arr, out=arr)
        np.clip(arr, 0, 255, out=arr)
        im = Image.fromarray(arr.astype(np.uint8), "L")
        del arr
        return im.convert("RGB")
    if mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    if mode == "RGB":
        return im.copy()
    return im.convert("RGB")


def iter_images(paths, *, on_error=None, **kwargs):
    """Yield ``(position, image)`` for every loadable path; report the others.

    Parameters
    ----------
    paths : sequence of path-like
    on_error : callable(position, path, message), optional
        Called for every file that cannot be loaded (default: a warning).
    **kwargs
        Passed to :func:`load_image` (``max_pixels``, ``draft``).
    """
    for i, p in enumerate(paths):
        try:
            yield i, load_image(p, **kwargs)
        except ImageLoadError as exc:
            if on_error is None:
                warnings.warn(f"skipped {exc}", RuntimeWarning, stacklevel=2)
            else:
                on_error(i, os.fspath(p), str(exc))


def list_images(folder):
    """All files with an image extension under ``folder`` (recursive, sorted)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no image folder at {str(folder)!r}")
    return sorted(str(p) for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


# --------------------------------------------------------------------------- COCO
def _read_json(path, what):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {what} at {path!r}")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path!r} is not valid JSON ({what}): {exc}") from None


def load_coco(annotations, image_dir):
    """MS COCO from an ``instances_*.json`` file and its image folder.

    Images without any annotation get all-zero labels (the splits drop them).

    Returns
    -------
    ImageDataset
        12 supercategories as concepts, 80 categories as sub-labels.
    """
    data = _read_json(annotations, "COCO annotation file")
    if not isinstance(data, dict) or not {"images", "annotations", "categories"} <= set(data):
        raise ValueError(f"{os.fspath(annotations)!r} is not a COCO instances file "
                         "(needs 'images', 'annotations' and 'categories').")
    image_dir = Path(image_dir)
    if not image_dir.is_dir():
        raise FileNotFoundError(f"no COCO image folder at {str(image_dir)!r}")
    cats = sorted(data["categories"], key=lambda c: c["id"])
    supers = list(dict.fromkeys(c["supercategory"] for c in cats))
    cat_col = {c["id"]: i for i, c in enumerate(cats)}
    sub_to_concept = np.array([supers.index(c["supercategory"]) for c in cats])
    images = sorted(data["images"], key=lambda im: im["id"])
    row = {im["id"]: i for i, im in enumerate(images)}
    Z = np.zeros((len(images), len(cats)), dtype=bool)
    for ann in data["annotations"]:
        r, c = row.get(ann.get("image_id")), cat_col.get(ann.get("category_id"))
        if r is not None and c is not None:
            Z[r, c] = True
    Y = np.zeros((len(images), len(supers)), dtype=bool)
    for c, j in enumerate(sub_to_concept):
        Y[:, j] |= Z[:, c]
    paths = [str(image_dir / im["file_name"]) for im in images]
    ids = [str(im["id"]) for im in images]
    return ImageDataset(paths, ids, Y, supers, Z, [c["name"] for c in cats], sub_to_concept, name="coco")


# --------------------------------------------------------------------------- MIRFlickr
def _find_annotation_dir(root):
    root = Path(root)
    for cand in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if (cand / "animals.txt").is_file() and (cand / "sky.txt").is_file():
            return cand
    return None


def _read_numbers(path):
    nums = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    nums.append(int(line))
                except ValueError:
                    raise ValueError(f"{path}: expected one image number per line, found {line!r}.") from None
    return nums


def load_mirflickr(root, annotations=None, *, relevant_only=False):
    """MIRFlickr25K in its official layout.

    Image files are matched case-insensitively (``im16.JPG``); annotation lines naming an
    image that is absent are ignored; images no file names get no labels (the split drops
    them).

    Parameters
    ----------
    root : path
        Folder containing ``mirflickr/`` (with ``im1.jpg`` ...) or that folder itself.
    annotations : path, optional
        Annotation folder; default: searched under ``root``.
    relevant_only : bool
        Use the strict ``*_r1.txt`` annotations.

    Returns
    -------
    ImageDataset
        11 general concepts and 13 sub-labels (:data:`MIRFLICKR_HIERARCHY`).
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no MIRFlickr folder at {str(root)!r}")
    img_dir = root / "mirflickr" if (root / "mirflickr").is_dir() else root
    ann_dir = Path(annotations) if annotations is not None else _find_annotation_dir(root)
    if ann_dir is None or not ann_dir.is_dir():
        raise FileNotFoundError(f"no MIRFlickr annotation folder (with animals.txt, sky.txt, ...) under {str(root)!r}")
    files = {}  # image number -> actual file (the extension's case varies: im16.JPG)
    for p in img_dir.iterdir():
        if p.name.lower().startswith("im") and p.suffix.lower() in (".jpg", ".jpeg") and p.stem[2:].isdigit():
            files.setdefault(int(p.stem[2:]), p)
    if not files:
        raise FileNotFoundError(f"no im<N>.jpg images in {str(img_dir)!r}")
    numbers = sorted(files)
    row = {n: i for i, n in enumerate(numbers)}
    concepts = list(MIRFLICKR_HIERARCHY)
    subs = [s for c in concepts for s in MIRFLICKR_HIERARCHY[c]]
    sub_to_concept = np.array([concepts.index(c) for c in concepts for _ in MIRFLICKR_HIERARCHY[c]])

    def column(label):
        f = ann_dir / (f"{label}_r1.txt" if relevant_only else f"{label}.txt")
        if relevant_only and not f.is_file():
            f = ann_dir / f"{label}.txt"
        if not f.is_file():
            raise FileNotFoundError(f"MIRFlickr annotation file {str(f)!r} is missing.")
        col = np.zeros(len(numbers), dtype=bool)
        for n in _read_numbers(f):
            if n in row:
                col[row[n]] = True
        return col

    Z = np.stack([column(s) for s in subs], axis=1)
    Y = np.stack([column(c) for c in concepts], axis=1)
    for k, j in enumerate(sub_to_concept):
        Y[:, j] |= Z[:, k]
    paths = [str(files[n]) for n in numbers]
    return ImageDataset(paths, [str(n) for n in numbers], Y, concepts, Z, subs, sub_to_concept, name="mirflickr")


# --------------------------------------------------------------------------- generic folder
_IMAGE_KEYS = ("image", "file", "filename", "path", "file_name")


def _split_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    text = str(value)
    for sep in ("|", ";", ","):
        if sep in text:
            return [t.strip() for t in text.split(sep) if t.strip()]
    return [text.strip()] if text.strip() else []


def _parse_sub(tokens, concept_of_sub):
    out = []
    for t in tokens:
        if "/" in t:
            c, s = t.split("/", 1)
            out.append((c.strip(), s.strip()))
        elif t in concept_of_sub:
            out.append((concept_of_sub[t], t))
        else:
            raise ValueError(f"sub-label {t!r} must be written as 'concept/sub_label'.")
    return out


def load_folder(image_dir, labels=None):
    """Images under a folder with labels from a CSV or JSON file.

    Label file formats (sub-labels are optional and written ``concept/sub``):

    * CSV, one column per concept: ``image,animal,person,animal/dog`` with
      0/1 values (columns containing ``/`` are sub-labels);
    * CSV with list columns: ``image,labels,sub_labels`` where lists are
      separated by ``|`` or ``;`` (e.g. ``animal|person`` and ``animal/dog``);
    * JSON: ``[{"image": "a.jpg", "labels": [...], "sub_labels": [...]}]``
      or ``{"a.jpg": ["animal", "person"], ...}``.

    ``image`` is a path relative to ``image_dir`` (a bare file name also
    works when it is unique). Without a label file, every image of the
    folder is listed with no labels (enough for ``slics embed``).

    Returns
    -------
    ImageDataset
    """
    image_dir = Path(image_dir)
    files = list_images(image_dir)
    if labels is None:
        return ImageDataset(files, [os.path.relpath(f, image_dir) for f in files],
                            np.zeros((len(files), 0), dtype=bool), [], name=image_dir.name)
    records, declared = _read_label_records(labels)
    rel = [os.path.relpath(f, image_dir) for f in files]
    row_of = _match_label_rows(rel, records, labels, root=image_dir)
    matched = {r: i for i, r in enumerate(row_of) if r is not None}
    missing = next((rec for r, rec in enumerate(records) if r not in matched), None)
    if missing is not None:
        raise ValueError(f"label file {os.fspath(labels)!r} {missing['where']}: image {missing['image']!r} is not "
                         f"found under {str(image_dir)!r}; fix the path or remove that row.")
    order = [matched[r] for r in range(len(records))]
    Y, concepts, Z, subs, s2c = _label_arrays(records, declared)
    return ImageDataset([files[i] for i in order], [rel[i].replace("\\", "/") for i in order], Y, concepts, Z, subs,
                        s2c, name=image_dir.name)


def _path_parts(path, root_parts=()) -> tuple:
    """Components of ``path`` (``/`` or ``\\`` separators, no empty or ``.`` parts), relative to the root
    whose components are ``root_parts`` when ``path`` is an absolute path under it."""
    text = str(path).replace("\\", "/")
    parts = tuple(c for c in text.split("/") if c not in ("", "."))
    if root_parts and text.startswith("/") and parts[:len(root_parts)] == root_parts:
        parts = parts[len(root_parts):]
    return parts


def _match_label_rows(ids, records, source, *, root=None) -> list:
    """For each id, the number of the label record naming it (None: unlabelled), one-to-one.

    A record names an id when one path is the other's whole-component suffix (``set1/a.jpg``
    names ``/data/set1/a.jpg``, never ``/data/set2/a.jpg``; ``g.jpg`` never names ``img.jpg``),
    after making absolute paths under ``root`` relative to it. The exact path wins, then the longest
    suffix; a record fitting several ids, or two records naming one id, are refused with a
    ``ValueError`` naming them.
    """
    root_parts = _path_parts(os.path.abspath(root)) if root is not None else ()
    idp = [_path_parts(x, root_parts) for x in ids]
    names = [_path_parts(rec["image"], root_parts) for rec in records]
    full, suffix = {}, {}
    for i, p in enumerate(idp):
        full.setdefault(p, []).append(i)
    for n in {len(p) for p in names}:  # suffixes only of the lengths the label rows have
        for i, p in enumerate(idp):
            if 0 < n < len(p):
                suffix.setdefault(p[-n:], []).append(i)
    source = os.fspath(source)
    row_of = [None] * len(ids)
    for r, (rec, p) in enumerate(zip(records, names)):
        hits = full.get(p) or suffix.get(p) or next((full[p[k:]] for k in range(1, len(p)) if p[k:] in full), [])
        if len(hits) > 1:
            shown = ", ".join(repr(ids[i]) for i in hits[:3]) + (f" and {len(hits) - 3} more" if len(hits) > 3 else "")
            raise ValueError(f"label file {source!r} {rec['where']}: {rec['image']!r} fits {len(hits)} ids ({shown}); "
                             "write its path as in the ids (with its folders), or give --images the folder the ids "
                             "are relative to.")
        if hits:
            i = hits[0]
            if row_of[i] is not None:
                first = records[row_of[i]]["where"]
                raise ValueError(f"label file {source!r}: {first.replace('line', 'lines').replace('entry', 'entries')}"
                                 f" and {rec['where'].split()[-1]} both name {ids[i]!r}; keep one of them.")
            row_of[i] = r
    return row_of


def _label_arrays(records, declared=()):
    """``(Y, concepts, Z, sub_names, sub_to_concept)`` of label records (``None`` for a record: no labels).

    Concepts are ordered as declared, then by first appearance; sub-labels are ``concept/sub``.
    """
    concepts = [c for c in declared if "/" not in c]
    subs = []
    for c in declared:
        if "/" in c:
            cs = tuple(t.strip() for t in c.split("/", 1))
            if cs[0] not in concepts:
                concepts.append(cs[0])
            subs.append(cs)
    for rec in records:
        if rec is None:
            continue
        for c in rec["labels"]:
            if c not in concepts:
                concepts.append(c)
        for c, s in rec["subs"]:
            if c not in concepts:
                concepts.append(c)
            if (c, s) not in subs:
                subs.append((c, s))
    Y = np.zeros((len(records), len(concepts)), dtype=bool)
    Z = np.zeros((len(records), len(subs)), dtype=bool)
    for i, rec in enumerate(records):
        if rec is None:
            continue
        for c in rec["labels"]:
            Y[i, concepts.index(c)] = True
        for cs in rec["subs"]:
            Z[i, subs.index(cs)] = True
            Y[i, concepts.index(cs[0])] = True
    s2c = np.array([concepts.index(c) for c, _ in subs], dtype=int)
    if not subs:
        return Y, concepts, None, [], None
    return Y, concepts, Z, [f"{c}/{s}" for c, s in subs], s2c


# --------------------------------------------------------------------------- precomputed embeddings
_ID_COLUMNS = ("image_path", "path", "image", "file", "filename", "file_name", "id", "key")


def _numbered(folder, prefix, suffix):
    found = []
    for p in Path(folder).iterdir():
        m = re.fullmatch(re.escape(prefix) + r"_?(\d+)" + re.escape(suffix), p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def _read_csv(path, what):
    """``(header, rows)`` of a CSV file; ``rows`` are ``(line number, fields)``, blank lines skipped.

    The one place CSV files are read (label files, metadata). The file must
    be UTF-8 (a byte-order mark is allowed) and every row must have as many
    fields as the header; otherwise a ``ValueError`` names the file, the
    line and what to do.
    """
    path = os.fspath(path)
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{what} {path!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
                         "save it as UTF-8 (in a spreadsheet: 'CSV UTF-8') and run again.") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header or not any(f.strip() for f in header):
            raise ValueError(f"{what} {path!r} is empty (no header line).")
        header = [f.strip() for f in header]
        dup = next((f for i, f in enumerate(header) if f and f in header[:i]), None)
        if dup is not None:
            raise ValueError(f"{what} {path!r}: column {dup!r} appears twice in the header; rename one.")
        rows = []
        for row in reader:
            if not any(f.strip() for f in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{what} {path!r} line {reader.line_num}: {len(row)} fields where the header has "
                                 f"{len(header)}; fix that line (quote values that contain commas) and run again.")
            rows.append((reader.line_num, row))
    except csv.Error as exc:
        raise ValueError(f"{what} {path!r} line {reader.line_num}: {exc}; fix that line and run again.") from None
    return header, rows


def _pandas():
    """pandas, imported when a metadata table is read (an optional library: one line names its extra)."""
    return require("pandas", "reading metadata tables")


def _read_table(path):
    """A metadata table (parquet, CSV or a text file of ids) as a pandas DataFrame."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no metadata file at {str(path)!r}")
    low = path.name.lower()
    if low.endswith(".csv"):
        header, rows = _read_csv(path, "metadata file")
        return _pandas().DataFrame([r for _, r in rows], columns=header, dtype=object)
    try:
        if low.endswith(".parquet"):
            return _pandas().read_parquet(path)
        if low.endswith((".txt", ".lst")):
            return _pandas().DataFrame({"id": [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()
                                        if ln.strip()]})
    except UnicodeDecodeError:
        raise ValueError(f"metadata file {str(path)!r} is not UTF-8 text; save it as UTF-8 and run again.") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"metadata file {str(path)!r} cannot be read: {exc}") from None
    raise ValueError(f"metadata file {str(path)!r}: use .parquet, .csv or .txt (one id per line)")


def _id_column(df, source):
    col = next((c for c in _ID_COLUMNS if c in df.columns), None)
    if col is None:
        raise ValueError(f"{source}: needs an id column (one of {', '.join(_ID_COLUMNS)}); found {list(df.columns)}")
    return col


def _list_cell(v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return []
    if isinstance(v, (list, tuple, np.ndarray)):
        return [str(x).strip() for x in v if str(x).strip()]
    return _split_list(v)


def _embedding_column(values, src):
    """``(n, d)`` float32 array of a parquet ``embedding`` column (one list of numbers per row); a row that is
    missing, not numbers or of another length is named in a one-line ``ValueError``."""
    if not len(values):
        return np.zeros((0, 0), np.float32)
    try:
        return np.stack([np.asarray(v, dtype=np.float32) for v in values])
    except (TypeError, ValueError):
        pass
    where = f"{str(src)!r}, column 'embedding'"
    d = None
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            raise ValueError(f"{where}, row {i} (counting from 0) is empty; every row needs a list of numbers.")
        if isinstance(v, (str, bytes)):
            raise ValueError(f"{where}, row {i} (counting from 0) is text ({str(v)[:30]!r}), not a list of numbers; "
                             "write the embeddings as lists of floats.")
        try:
            a = np.asarray(v, dtype=np.float32)
        except (TypeError, ValueError):
            raise ValueError(f"{where}, row {i} (counting from 0) is not a list of numbers "
                             f"({str(list(v))[:40]!r}).") from None
        if a.ndim != 1:
            raise ValueError(f"{where}, row {i} (counting from 0) has shape {a.shape}, not one list of numbers.")
        if d is None:
            d = a.size
        elif a.size != d:
            raise ValueError(f"{where}, row {i} (counting from 0) has {a.size} numbers where row 0 has {d}; "
                             "every embedding must have the same length.")
    raise ValueError(f"{where} cannot be read as one (n, d) array of numbers.")


def load_precomputed(embeddings, *, metadata=None, labels=None, images=None):
    """Embeddings computed elsewhere, with their ids and labels.

    Parameters
    ----------
    embeddings : path
        One of: a folder in clip-retrieval's layout (``img_emb/img_emb_0.npy`` ... and
        ``metadata/metadata_0.parquet`` ..., matched by number; the id column is
        ``image_path``, else ``key``); a ``.npy`` file ``(n, d)`` (ids from ``metadata``); a
        ``.parquet`` file with an ``embedding`` column (one list per row) and an id column.
    metadata : path, optional
        Ids for a ``.npy`` file, in row order: ``.parquet`` / ``.csv`` with an id column
        (``image_path``, ``path``, ``image``, ``file``, ``id``, ``key``...) or ``.txt`` (one id
        per line). Label columns ``labels`` / ``sub_labels`` (lists, or ``a|b`` strings) are read too.
    labels : path, optional
        A CSV / JSON label file in :func:`load_folder`'s formats, matched one-to-one to the ids on
        whole path components (relative to ``images``, else the longest path suffix); a row that
        fits several ids, two rows naming one id, or no row naming any id are errors. Items it does
        not name get no labels; ``dataset.label_report`` says how many rows matched.
    images : path, optional
        Folder the ids are relative to, for thumbnails (ids that are existing files are used
        as they are).

    Returns
    -------
    E : ndarray of shape (n, d), float32
    dataset : ImageDataset
        ``paths`` are image files where they exist, else None.
    """
    src = Path(embeddings)
    if src.is_dir():
        emb_dir, meta_dir = src / "img_emb", src / "metadata"
        if not emb_dir.is_dir() or not meta_dir.is_dir():
            raise FileNotFoundError(f"{str(src)!r} is not in clip-retrieval's layout (img_emb/ and metadata/ folders)")
        emb_files = _numbered(emb_dir, "img_emb", ".npy")
        meta_files = _numbered(meta_dir, "metadata", ".parquet")
        if not emb_files or len(emb_files) != len(meta_files):
            raise ValueError(f"{str(src)!r}: {len(emb_files)} img_emb_*.npy files for {len(meta_files)} "
                             "metadata_*.parquet files")
        parts, tables = [], []
        for ef, mf in zip(emb_files, meta_files):
            check_npy(ef, "fiu", fix="export it again")
            e = np.load(ef, allow_pickle=False)
            t = _pandas().read_parquet(mf)
            if len(e) != len(t):
                raise ValueError(f"{ef.name} has {len(e)} rows but {mf.name} has {len(t)}")
            parts.append(e)
            tables.append(t)
        E = np.concatenate(parts)
        meta = _pandas().concat(tables, ignore_index=True)
    elif src.suffix.lower() == ".npy":
        if metadata is None:
            raise ValueError(f"{str(src)!r}: a .npy file needs --metadata naming the ids of its rows")
        try:
            check_npy(src, "fiu", fix="export it again")
            E = np.load(src, allow_pickle=False)
        except DamagedFileError:
            raise
        except (OSError, ValueError) as exc:
            raise ValueError(f"{str(src)!r} cannot be read as a .npy array: {exc}") from None
        meta = _read_table(metadata)
        if len(meta) != len(E):
            raise ValueError(f"{str(src)!r} has {len(E)} rows but {metadata} names {len(meta)} ids")
    elif src.suffix.lower() == ".parquet":
        meta = _read_table(src)
        if "embedding" not in meta.columns:
            raise ValueError(f"{str(src)!r}: needs an 'embedding' column (one list of floats per row)")
        E = _embedding_column(meta["embedding"], src)
    elif not src.exists():
        raise FileNotFoundError(f"no embeddings at {str(src)!r}")
    else:
        raise ValueError(f"{str(src)!r}: use a clip-retrieval folder, a .npy file or a .parquet file")
    E = np.asarray(E, dtype=np.float32)
    if E.ndim != 2 or E.shape[0] == 0:
        raise ValueError(f"{str(src)!r}: expected a non-empty (n, d) array of embeddings, got shape {E.shape}")
    if not np.isfinite(E).all():
        raise ValueError(f"{str(src)!r}: embeddings contain NaN or infinite values")
    ids = [str(x) for x in meta[_id_column(meta, str(metadata or src))]]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{str(metadata or src)!r}: ids are not unique")
    recs = [None] * len(ids)
    declared, report = [], None
    if labels is not None:
        records, declared = _read_label_records(labels)
        row_of = _match_label_rows(ids, records, labels, root=images)
        n_matched = sum(r is not None for r in row_of)
        if records and not n_matched:
            raise ValueError(f"none of the {len(records)} label rows of {os.fspath(labels)!r} names one of the "
                             f"{len(ids)} ids of {str(metadata or src)!r} (label {records[0]['image']!r}, id "
                             f"{ids[0]!r}); write label paths as the ids are written, or relative to --images.")
        recs = [None if r is None else records[r] for r in row_of]
        report = f"{n_matched} of {len(records)} label rows matched, {len(ids) - n_matched} ids unlabelled"
    elif "labels" in meta.columns:
        subs = meta["sub_labels"] if "sub_labels" in meta.columns else [None] * len(meta)
        recs = [{"labels": _list_cell(a), "subs": _parse_sub(_list_cell(b), {})} for a, b in zip(meta["labels"], subs)]
    Y, concepts, Z, sub_names, s2c = _label_arrays(recs, declared)
    root = Path(images) if images is not None else None
    paths = []
    for x in ids:
        cand = root / x if root is not None else Path(x)
        paths.append(str(cand) if cand.is_file() else None)
    name = src.stem if src.is_file() else src.name
    return E, ImageDataset(paths, ids, Y, concepts, Z, sub_names, s2c, name=name, label_report=report)


def _read_label_records(labels):
    labels = os.fspath(labels)
    if not os.path.isfile(labels):
        raise FileNotFoundError(f"no label file at {labels!r}")
    recs, declared = [], []
    if labels.lower().endswith(".json"):
        data = _read_json(labels, "label file")
        if isinstance(data, dict):
            data = [{"image": k, "labels": v} for k, v in data.items()]
        if not isinstance(data, list):
            raise ValueError(f"{labels!r}: expected a list of records or an {{image: labels}} object.")
        for entry, rec in enumerate(data, 1):
            if not isinstance(rec, dict) or not any(k in rec for k in _IMAGE_KEYS):
                raise ValueError(f"{labels!r}: every record needs an 'image' entry; got {rec!r}.")
            img = next(str(rec[k]) for k in _IMAGE_KEYS if k in rec)
            subs = rec.get("sub_labels", [])
            if isinstance(subs, dict):
                subs = [f"{c}/{s}" for c, ss in subs.items() for s in _split_list(ss)]
            recs.append({"image": img, "labels": _split_list(rec.get("labels", [])), "subs": _split_list(subs),
                         "where": f"entry {entry}"})
    else:
        fields, rows = _read_csv(labels, "label file")
        key = next((f for f in fields if f.lower() in _IMAGE_KEYS), None)
        if key is None:
            raise ValueError(f"{labels!r}: needs an image column (one of {_IMAGE_KEYS}); found {fields}.")
        wide = "labels" not in [f.lower() for f in fields]
        if wide:
            declared = [f for f in fields if f != key]
        for line_no, values in rows:
            row = {k: v.strip() for k, v in zip(fields, values)}
            if wide:
                lab, sub = [], []
                for f in fields:
                    if f == key:
                        continue
                    v = row.get(f, "")
                    if v not in ("", "0", "1", "0.0", "1.0"):
                        raise ValueError(f"{labels!r} line {line_no}: column {f!r} must be 0/1; got {v!r}.")
                    if v in ("1", "1.0"):
                        (sub if "/" in f else lab).append(f)
                recs.append({"image": row[key], "labels": lab, "subs": sub, "where": f"line {line_no}"})
            else:
                lk = next(f for f in fields if f.lower() == "labels")
                sk = next((f for f in fields if f.lower() in ("sub_labels", "sublabels")), None)
                recs.append({"image": row[key], "labels": _split_list(row.get(lk)),
                             "subs": _split_list(row.get(sk)) if sk else [], "where": f"line {line_no}"})
    for rec in recs:
        rec["subs"] = _parse_sub(rec["subs"], {})
    return recs, declared
