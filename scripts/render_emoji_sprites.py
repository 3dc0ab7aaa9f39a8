"""Render the emoji world's sprites from Noto Color Emoji (run once; output is shipped).

Usage::

    apt-get install -y fonts-noto-color-emoji
    python scripts/render_emoji_sprites.py [--font PATH] [--size 48] [--out assets/emoji/sprites]

Each category's emoji is drawn with Pillow at the font's only bitmap size
(109 px, ``embedded_color=True``), cropped to its opaque bounding box, padded to
a square and down-sampled (Lanczos) to ``--size`` pixels, then written as an
RGBA PNG named after the category (see ``slics_core.emoji.catalog``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from slics_core.emoji.catalog import EMOJI_FOR_CATEGORY, SPRITES_DIR, sprite_filename

DEFAULT_FONT = "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"


def render(font: ImageFont.FreeTypeFont, text: str, size: int) -> Image.Image:
    canvas = Image.new("RGBA", (160, 160), (0, 0, 0, 0))
    ImageDraw.Draw(canvas).text((10, 10), text, font=font, embedded_color=True)
    bbox = canvas.getchannel("A").getbbox()
    if bbox is None:
        raise ValueError(f"the font has no glyph for {text!r}")
    glyph = canvas.crop(bbox)
    side = max(glyph.size)
    square = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    square.paste(glyph, ((side - glyph.width) // 2, (side - glyph.height) // 2))
    return square.resize((size, size), Image.LANCZOS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--font", default=DEFAULT_FONT)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--out", type=Path, default=SPRITES_DIR)
    args = ap.parse_args(argv)
    if not Path(args.font).is_file():
        print(f"font not found: {args.font} (apt-get install -y fonts-noto-color-emoji)", file=sys.stderr)
        return 2
    font = ImageFont.truetype(args.font, 109)
    args.out.mkdir(parents=True, exist_ok=True)
    for category, text in EMOJI_FOR_CATEGORY.items():
        img = render(font, text, args.size)
        img.save(args.out / sprite_filename(category), optimize=True)
    print(f"wrote {len(EMOJI_FOR_CATEGORY)} sprites to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
