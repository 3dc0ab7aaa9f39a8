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

The label-file readers (:func:`read_label_records`, :func:`match_label_rows`,
:func:`label_arrays`) are shared with :mod:`slics_core.precomputed`
(embeddings computed elsewhere, with ids and labels); images are decoded by
:mod:`slics_core.images`.
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slics_core.formats import read_json
from slics_core.images import list_images
from slics_core.labels import CarriesLabels, Labels

__all__ = [
    "ImageDataset",
    "MIRFLICKR_HIERARCHY",
    "load_coco",
    "load_mirflickr",
    "load_folder",
]

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


@dataclass
class ImageDataset(CarriesLabels):
    """A labelled image collection.

    Attributes
    ----------
    paths : list of str
    ids : list of str
        Stable identifiers (file name or dataset id).
    labels : slics_core.labels.Labels
        General labels, sub-labels and their names (``Y``, ``concept_names``, ``Z``, ``sub_names``,
        ``sub_to_concept`` read it).
    name : str
    label_report : str or None
        How a separate label file was matched to the ids ("N of M label rows matched, K ids
        unlabelled"), when one was.
    """

    paths: list
    ids: list
    labels: Labels
    name: str = "dataset"
    label_report: str | None = None

    def __post_init__(self):
        self._check_labels(len(self.paths), "images")

    def __len__(self):
        return len(self.paths)

    def labels_dict(self):
        """Label arrays for :class:`slics_core.store.EmbeddingStore` (:meth:`slics_core.labels.Labels.to_arrays`)."""
        return self.labels.to_arrays()


# --------------------------------------------------------------------------- COCO
def _read_json(path, what):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {what} at {path!r}")
    return read_json(path, fix=f"check that it is the {what} (valid UTF-8 JSON)")


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
    return ImageDataset(paths, ids, Labels(Y, supers, Z, [c["name"] for c in cats], sub_to_concept), name="coco")


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
    return ImageDataset(paths, [str(n) for n in numbers], Labels(Y, concepts, Z, subs, sub_to_concept),
                        name="mirflickr")


# --------------------------------------------------------------------------- generic folder
_IMAGE_KEYS = ("image", "file", "filename", "path", "file_name")


def split_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    text = str(value)
    for sep in ("|", ";", ","):
        if sep in text:
            return [t.strip() for t in text.split(sep) if t.strip()]
    return [text.strip()] if text.strip() else []


def parse_sub_labels(tokens, concept_of_sub):
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
                            Labels(np.zeros((len(files), 0), dtype=bool), []), name=image_dir.name)
    records, declared = read_label_records(labels)
    rel = [os.path.relpath(f, image_dir) for f in files]
    row_of = match_label_rows(rel, records, labels, root=image_dir)
    matched = {r: i for i, r in enumerate(row_of) if r is not None}
    missing = next((rec for r, rec in enumerate(records) if r not in matched), None)
    if missing is not None:
        raise ValueError(f"label file {os.fspath(labels)!r} {missing['where']}: image {missing['image']!r} is not "
                         f"found under {str(image_dir)!r}; fix the path or remove that row.")
    order = [matched[r] for r in range(len(records))]
    return ImageDataset([files[i] for i in order], [rel[i].replace("\\", "/") for i in order],
                        label_arrays(records, declared), name=image_dir.name)


def _path_parts(path, root_parts=()) -> tuple:
    """Components of ``path`` (``/`` or ``\\`` separators, no empty or ``.`` parts), relative to the root
    whose components are ``root_parts`` when ``path`` is an absolute path under it."""
    text = str(path).replace("\\", "/")
    parts = tuple(c for c in text.split("/") if c not in ("", "."))
    if root_parts and text.startswith("/") and parts[:len(root_parts)] == root_parts:
        parts = parts[len(root_parts):]
    return parts


def match_label_rows(ids, records, source, *, root=None) -> list:
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


def label_arrays(records, declared=()) -> Labels:
    """The :class:`~slics_core.labels.Labels` of label records (``None`` for a record: no labels).

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
    if not subs:
        return Labels(Y, concepts)
    return Labels(Y, concepts, Z, [f"{c}/{s}" for c, s in subs], [concepts.index(c) for c, _ in subs])


def read_csv_rows(path, what):
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


def read_label_records(labels):
    labels = os.fspath(labels)
    if os.path.isdir(labels):
        raise IsADirectoryError(f"{labels!r} is a folder, not a label file; give the labels CSV file "
                                "(image,concept,... with 0/1 values, or image,labels) or a JSON label file")
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
                subs = [f"{c}/{s}" for c, ss in subs.items() for s in split_list(ss)]
            recs.append({"image": img, "labels": split_list(rec.get("labels", [])), "subs": split_list(subs),
                         "where": f"entry {entry}"})
    else:
        fields, rows = read_csv_rows(labels, "label file")
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
                recs.append({"image": row[key], "labels": split_list(row.get(lk)),
                             "subs": split_list(row.get(sk)) if sk else [], "where": f"line {line_no}"})
    for rec in recs:
        rec["subs"] = parse_sub_labels(rec["subs"], {})
    return recs, declared
