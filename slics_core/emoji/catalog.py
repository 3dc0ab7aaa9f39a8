"""The emoji world's vocabulary: COCO categories, supercategories and sprites.

Every COCO category that has a fitting emoji in Noto Color Emoji is listed in
:data:`EMOJI_FOR_CATEGORY` (71 of the 80). Some are approximations, noted in
:data:`APPROXIMATIONS`; the nine without any fitting emoji are listed in
:data:`MISSING_CATEGORIES`. The order of :data:`SUPERCATEGORIES` and
:data:`CATEGORIES` is COCO's (by category id) and defines the label columns.
"""
from __future__ import annotations

from slics_core.weights import ASSETS_DIR, EMOJI_MODELS_DIR

__all__ = [
    "SUPERCATEGORIES",
    "CATEGORIES",
    "CATEGORY_SUPER",
    "EMOJI_FOR_CATEGORY",
    "APPROXIMATIONS",
    "MISSING_CATEGORIES",
    "ASSETS_DIR",
    "SPRITES_DIR",
    "MODELS_DIR",
    "sprite_filename",
    "ALL_COCO_CATEGORIES",
]

# COCO's 80 categories in id order, with their supercategory (from the COCO
# annotation file; also in shared/data/coco_categories.json).
_COCO = [
    ("person", "person"),
    ("bicycle", "vehicle"), ("car", "vehicle"), ("motorcycle", "vehicle"),
    ("airplane", "vehicle"), ("bus", "vehicle"), ("train", "vehicle"),
    ("truck", "vehicle"), ("boat", "vehicle"),
    ("traffic light", "outdoor"), ("fire hydrant", "outdoor"), ("stop sign", "outdoor"),
    ("parking meter", "outdoor"), ("bench", "outdoor"),
    ("bird", "animal"), ("cat", "animal"), ("dog", "animal"), ("horse", "animal"),
    ("sheep", "animal"), ("cow", "animal"), ("elephant", "animal"), ("bear", "animal"),
    ("zebra", "animal"), ("giraffe", "animal"),
    ("backpack", "accessory"), ("umbrella", "accessory"), ("handbag", "accessory"),
    ("tie", "accessory"), ("suitcase", "accessory"),
    ("frisbee", "sports"), ("skis", "sports"), ("snowboard", "sports"),
    ("sports ball", "sports"), ("kite", "sports"), ("baseball bat", "sports"),
    ("baseball glove", "sports"), ("skateboard", "sports"), ("surfboard", "sports"),
    ("tennis racket", "sports"),
    ("bottle", "kitchen"), ("wine glass", "kitchen"), ("cup", "kitchen"), ("fork", "kitchen"),
    ("knife", "kitchen"), ("spoon", "kitchen"), ("bowl", "kitchen"),
    ("banana", "food"), ("apple", "food"), ("sandwich", "food"), ("orange", "food"),
    ("broccoli", "food"), ("carrot", "food"), ("hot dog", "food"), ("pizza", "food"),
    ("donut", "food"), ("cake", "food"),
    ("chair", "furniture"), ("couch", "furniture"), ("potted plant", "furniture"),
    ("bed", "furniture"), ("dining table", "furniture"), ("toilet", "furniture"),
    ("tv", "electronic"), ("laptop", "electronic"), ("mouse", "electronic"),
    ("remote", "electronic"), ("keyboard", "electronic"), ("cell phone", "electronic"),
    ("microwave", "appliance"), ("oven", "appliance"), ("toaster", "appliance"),
    ("sink", "appliance"), ("refrigerator", "appliance"),
    ("book", "indoor"), ("clock", "indoor"), ("vase", "indoor"), ("scissors", "indoor"),
    ("teddy bear", "indoor"), ("hair drier", "indoor"), ("toothbrush", "indoor"),
]

#: Noto Color Emoji code point sequence for each represented category.
EMOJI_FOR_CATEGORY: dict[str, str] = {
    "person": "\U0001F9CD",          # standing person
    "bicycle": "\U0001F6B2",
    "car": "\U0001F697",
    "motorcycle": "\U0001F3CD\uFE0F",
    "airplane": "\u2708\uFE0F",
    "bus": "\U0001F68C",
    "train": "\U0001F686",
    "truck": "\U0001F69A",
    "boat": "\u26F5",                # sailboat
    "traffic light": "\U0001F6A6",
    "stop sign": "\U0001F6D1",
    "bird": "\U0001F426",
    "cat": "\U0001F408",
    "dog": "\U0001F415",
    "horse": "\U0001F40E",
    "sheep": "\U0001F411",
    "cow": "\U0001F404",
    "elephant": "\U0001F418",
    "bear": "\U0001F43B",            # bear face
    "zebra": "\U0001F993",
    "giraffe": "\U0001F992",
    "backpack": "\U0001F392",
    "umbrella": "\u2602\uFE0F",
    "handbag": "\U0001F45C",
    "tie": "\U0001F454",             # necktie (shirt and tie)
    "suitcase": "\U0001F9F3",        # luggage
    "frisbee": "\U0001F94F",         # flying disc
    "skis": "\U0001F3BF",
    "snowboard": "\U0001F3C2",       # snowboarder
    "sports ball": "\u26BD",         # soccer ball
    "kite": "\U0001FA81",
    "baseball bat": "\U0001F3CF",    # cricket bat and ball
    "baseball glove": "\U0001F9E4",  # gloves
    "skateboard": "\U0001F6F9",
    "surfboard": "\U0001F3C4",       # surfer
    "tennis racket": "\U0001F3BE",   # tennis ball
    "bottle": "\U0001F37E",          # bottle with popping cork
    "wine glass": "\U0001F377",
    "cup": "\u2615",                 # hot beverage
    "fork": "\U0001F374",            # fork and knife
    "knife": "\U0001F52A",
    "spoon": "\U0001F944",
    "bowl": "\U0001F963",            # bowl with spoon
    "banana": "\U0001F34C",
    "apple": "\U0001F34E",
    "sandwich": "\U0001F96A",
    "orange": "\U0001F34A",          # tangerine
    "broccoli": "\U0001F966",
    "carrot": "\U0001F955",
    "hot dog": "\U0001F32D",
    "pizza": "\U0001F355",
    "donut": "\U0001F369",
    "cake": "\U0001F370",            # shortcake
    "chair": "\U0001FA91",
    "couch": "\U0001F6CB\uFE0F",     # couch and lamp
    "potted plant": "\U0001FAB4",
    "bed": "\U0001F6CF\uFE0F",
    "toilet": "\U0001F6BD",
    "tv": "\U0001F4FA",
    "laptop": "\U0001F4BB",
    "mouse": "\U0001F5B1\uFE0F",     # computer mouse
    "keyboard": "\u2328\uFE0F",
    "cell phone": "\U0001F4F1",
    "oven": "\U0001F373",            # cooking (frying pan)
    "sink": "\U0001F6B0",            # potable water (tap)
    "book": "\U0001F4D6",
    "clock": "\U0001F570\uFE0F",     # mantelpiece clock
    "vase": "\U0001F3FA",            # amphora
    "scissors": "\u2702\uFE0F",
    "teddy bear": "\U0001F9F8",
    "toothbrush": "\U0001FAA5",
}

#: Categories whose emoji only approximates the COCO object.
APPROXIMATIONS: dict[str, str] = {
    "baseball bat": "cricket bat and ball",
    "baseball glove": "gloves",
    "tennis racket": "tennis ball",
    "snowboard": "snowboarder",
    "surfboard": "surfer",
    "oven": "cooking (frying pan)",
    "sink": "potable water (tap)",
    "vase": "amphora",
    "cup": "hot beverage",
    "fork": "fork and knife",
}

SUPERCATEGORIES: tuple[str, ...] = tuple(dict.fromkeys(s for _, s in _COCO))
CATEGORIES: tuple[str, ...] = tuple(c for c, _ in _COCO if c in EMOJI_FOR_CATEGORY)
CATEGORY_SUPER: dict[str, str] = {c: s for c, s in _COCO if c in EMOJI_FOR_CATEGORY}
MISSING_CATEGORIES: tuple[str, ...] = tuple(c for c, _ in _COCO if c not in EMOJI_FOR_CATEGORY)
ALL_COCO_CATEGORIES: tuple[str, ...] = tuple(c for c, _ in _COCO)
#: Supercategory index (in SUPERCATEGORIES) of every one of the 80 COCO categories, in COCO order.
SUB_TO_CONCEPT: tuple[int, ...] = tuple(SUPERCATEGORIES.index(s) for _, s in _COCO)

SPRITES_DIR = ASSETS_DIR / "emoji" / "sprites"
MODELS_DIR = EMOJI_MODELS_DIR


def sprite_filename(category: str) -> str:
    """File name of a category's sprite PNG (spaces become underscores)."""
    if category not in EMOJI_FOR_CATEGORY:
        raise ValueError(f"no emoji sprite for category {category!r}")
    return category.replace(" ", "_") + ".png"

