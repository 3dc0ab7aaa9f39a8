"""Damage in a JPEG's compressed data that the decoder passes over: :func:`jpeg_damage`.

libjpeg (and so Pillow) decodes a JPEG whose entropy-coded data is damaged (bytes zeroed or changed in the
middle of the file, a piece cut out and the end-of-image marker still there) with a *warning* ("Corrupt JPEG
data: premature end of data segment", "bad Huffman code"), fills what it could not decode with grey, and
Pillow drops the warning: the image decodes and nothing says it is damaged. This module walks the
entropy-coded data the way a decoder does, without the inverse DCT: every Huffman code of every block of every
MCU of every scan is read, and the damage is what libjpeg would warn about:

* a code that is in no Huffman table, or a block with more than 64 coefficients;
* data that ends (at a marker) before the scan's last MCU ("premature end of data segment");
* restart markers out of their cycle RST0..RST7;
* more than :data:`EXTRA_BYTES_KEPT` bytes left after a scan's last MCU (a few bytes are a known harmless quirk of
  some encoders: "1 extraneous bytes before marker 0xd9").

Huffman-coded baseline, extended and progressive JPEGs are read (SOF0, SOF1, SOF2; a progressive JPEG's
refinement scans with the non-zero history of each block's coefficients, as a decoder keeps it); arithmetic-coded,
lossless and hierarchical JPEGs are not walked (they are rare). Truncated files (no end-of-image marker) are
Pillow's to refuse, and it does.

The walk is compiled by numba (``cache=True``); it reads each code bit by bit, about 10 ms for a 640 x 480
photo on the shared 2-core machine (docs/scale.md).
"""
from __future__ import annotations

import re

import numpy as np
from numba import njit

__all__ = ["EXTRA_BYTES_KEPT", "jpeg_damage"]

#: Bytes after a scan's last MCU that are not called damage (some encoders leave one or two; a damaged stream
#: that happens to end its MCUs early leaves far more).
EXTRA_BYTES_KEPT = 16

_MARKER = re.compile(rb"\xff+(?=[^\x00\xd0-\xd7\xff])")  # a marker's fill bytes, before its code
_WHY = {1: "a code in no Huffman table", 2: "a block of more than 64 coefficients",
        3: "the data end before the last block"}


#: Bits of the fast look-up (libjpeg's choice too): most codes are shorter, longer ones go the slow way.
_LOOKUP = 9


@njit(cache=True, nogil=True)
def _code(data, pos, end, lut, slow, t):
    """Decode one Huffman symbol of table ``t`` at bit ``pos``: ``(symbol, new pos)``; symbol -1: no such code,
    -2: the data ended. ``lut[t, next 9 bits]`` is ``symbol << 8 | code length`` for codes of up to 9 bits (0:
    longer, or none); ``slow[t]`` holds the spec's F.2.2.3 tables (maxcode, valptr, mincode by length, then the
    symbols) for the others. ``data`` has three zero bytes more than the data."""
    p = pos >> 3
    word = ((np.int64(data[p]) << 16) | (np.int64(data[p + 1]) << 8) | np.int64(data[p + 2])) >> (8 - (pos & 7))
    entry = lut[t, (word >> (16 - _LOOKUP)) & ((1 << _LOOKUP) - 1)]
    if entry != 0:
        pos += entry & 0xFF
        return (entry >> 8, pos) if pos <= end else (-2, pos)
    for length in range(_LOOKUP + 1, 17):
        code = (word >> (16 - length)) & ((1 << length) - 1)
        if code <= slow[t, length]:
            pos += length
            if pos > end:
                return -2, pos
            return slow[t, 51 + slow[t, 17 + length] + code - slow[t, 34 + length]], pos
    return (-2, pos) if pos >= end else (-1, pos)


@njit(cache=True, nogil=True)
def _fill(lut, slow, t, counts, symbols):
    """Table ``t``'s rows of the look-ups (:func:`_code`) from its code counts by length and its symbols: the
    canonical codes of the JPEG spec (C, F.2.2.3)."""
    lut[t, :] = 0
    slow[t, :] = 0
    slow[t, :17] = -1
    code = 0
    k = 0
    for length in range(1, 17):
        n = counts[length - 1]
        if n:
            slow[t, 17 + length] = k
            slow[t, 34 + length] = code
            slow[t, length] = code + n - 1
        for _ in range(n):
            if k >= symbols.size or code >= (1 << length):
                return
            slow[t, 51 + k] = symbols[k]
            if length <= _LOOKUP:
                lo = code << (_LOOKUP - length)
                lut[t, lo:lo + (1 << (_LOOKUP - length))] = (symbols[k] << 8) | length
            code += 1
            k += 1
        code <<= 1


@njit(cache=True, nogil=True)
def _entropy(raw, start, out, piece_end, rst):
    """A scan's entropy-coded data from ``raw[start:]`` to its closing marker, unstuffed (``FF 00`` -> ``FF``)
    into ``out``: returns ``(bytes written, restart markers met, where the closing marker's fill starts)``;
    ``piece_end[i]`` is where restart interval ``i`` ends in ``out`` and ``rst[i]`` its marker's number."""
    n = raw.size
    i = start
    o = 0
    k = 0
    while i < n:
        b = raw[i]
        if b != 0xFF:
            out[o] = b
            o += 1
            i += 1
            continue
        j = i + 1
        while j < n and raw[j] == 0xFF:  # fill bytes
            j += 1
        if j >= n:
            return o, k, i
        nxt = raw[j]
        if nxt == 0x00:
            out[o] = 0xFF
            o += 1
            i = j + 1
        elif 0xD0 <= nxt <= 0xD7:
            piece_end[k] = o
            rst[k] = nxt - 0xD0
            k += 1
            i = j + 1
        else:
            return o, k, i
    return o, k, n


@njit(cache=True, nogil=True)
def _bits(data, pos, end, n):
    """The ``n`` bits from bit ``pos`` of ``data`` (most significant first) as a number, and the position after
    them; -1 when they would pass ``end``."""
    v = 0
    for _ in range(n):
        if pos >= end:
            return -1, pos
        v = (v << 1) | ((data[pos >> 3] >> (7 - (pos & 7))) & 1)
        pos += 1
    return v, pos


@njit(cache=True, nogil=True)
def _bit_set(nz, blk, k):
    return (nz[blk] >> np.uint64(k)) & np.uint64(1)


@njit(cache=True, nogil=True)
def _walk(data, starts, ends, n_units, plan, dc_t, ac_t, ss, se, ah, nz, lut, slow):
    """Walk one scan's restart intervals: ``data[starts[i]:ends[i]]`` (bytes, unstuffed) holds ``n_units[i]``
    MCUs; an MCU is the blocks of ``plan`` (one component index per block). ``nz`` (a progressive AC scan's
    component: one bit per coefficient of each block, set once it is non-zero) is updated by the AC scans of a
    progressive JPEG, whose refinement scans read a correction bit for each. Returns ``(status, extra bytes)``:
    0 fine, 1 bad code, 2 > 64 coefficients, 3 premature end, 4 extra bytes (more than allowed is the caller's
    judgement)."""
    extra_max = 0
    blk = 0
    one = np.uint64(1)
    for i in range(starts.size):
        pos = starts[i] * 8
        end = ends[i] * 8
        eobrun = 0
        for _ in range(n_units[i]):
            for b in range(plan.size):
                c = plan[b]
                if ss == 0:  # DC (sequential scans go on to the AC coefficients below)
                    if ah > 0:  # progressive DC refinement: one bit
                        if pos >= end:
                            return 3, 0
                        pos += 1
                    else:
                        s, pos = _code(data, pos, end, lut, slow, dc_t[c])
                        if s < 0:
                            return 1 if s == -1 else 3, 0
                        if s > 16:
                            return 1, 0
                        pos += s
                    if se == 0:
                        continue
                    k = 1
                elif ah > 0:  # progressive AC refinement (the JPEG spec's G.1.2.3, as libjpeg reads it)
                    k = ss
                    if eobrun == 0:
                        while k <= se:
                            rs, pos = _code(data, pos, end, lut, slow, ac_t[c])
                            if rs < 0:
                                return 1 if rs == -1 else 3, 0
                            r = rs >> 4
                            s = rs & 15
                            if s != 0:
                                if s != 1:
                                    return 1, 0
                                pos += 1  # the new coefficient's sign
                            elif r != 15:
                                run, pos = _bits(data, pos, end, r)
                                if run < 0:
                                    return 3, 0
                                eobrun = (1 << r) + run
                                break
                            while k <= se:  # correction bits of non-zero ones, past r zero ones
                                if _bit_set(nz, blk, k):
                                    pos += 1
                                else:
                                    r -= 1
                                    if r < 0:
                                        break
                                k += 1
                            if s != 0:
                                if k > se:
                                    return 2, 0
                                nz[blk] |= one << np.uint64(k)
                            k += 1
                    if eobrun > 0:
                        while k <= se:
                            if _bit_set(nz, blk, k):
                                pos += 1
                            k += 1
                        eobrun -= 1
                    if pos > end:
                        return 3, 0
                    blk += 1
                    continue
                else:
                    k = ss
                    if eobrun > 0:
                        eobrun -= 1
                        blk += 1
                        continue
                while k <= se:
                    rs, pos = _code(data, pos, end, lut, slow, ac_t[c])
                    if rs < 0:
                        return 1 if rs == -1 else 3, 0
                    r = rs >> 4
                    s = rs & 15
                    if s == 0:
                        if r == 15:
                            k += 16
                            continue
                        if ss > 0 and r > 0:  # progressive end-of-band run
                            run, pos = _bits(data, pos, end, r)
                            if run < 0:
                                return 3, 0
                            eobrun = (1 << r) + run - 1
                        break
                    k += r
                    pos += s
                    if ss > 0 and k <= se:
                        nz[blk] |= one << np.uint64(k)
                    k += 1
                if k > se + 1:
                    return 2, 0
                if pos > end:
                    return 3, 0
                if ss > 0:
                    blk += 1
        left = (end - pos) // 8
        if left > extra_max:
            extra_max = left
    return (4 if extra_max > 0 else 0), extra_max


def jpeg_damage(data: bytes) -> str | None:
    """What is damaged in the JPEG ``data`` (its bytes), in words, or None when every scan that can be walked
    decodes cleanly (see the module notes; files this module does not read, e.g. arithmetic-coded ones, and
    data that is not a JPEG give None: others judge them)."""
    if not data.startswith(b"\xff\xd8"):
        return None
    frame, dht, ri, pos, n = None, set(), 0, 2, len(data)
    # the Huffman tables defined so far (a progressive file redefines them between scans): _code's look-ups
    lut, slow = np.zeros((8, 1 << _LOOKUP), np.int32), np.zeros((8, 51 + 256), np.int64)
    # the file as an array, the unstuffed data of one scan, where its restart intervals end and their numbers
    buffers = (np.frombuffer(data, np.uint8), np.zeros(len(data) + 3, np.uint8), np.zeros(len(data) // 2 + 1, np.int64),
               np.zeros(len(data) // 2 + 1, np.int64))
    while pos + 4 <= n:
        m = _MARKER.match(data, pos)
        if m is None:
            return None  # not at a marker: Pillow's parser reports what it makes of it
        code = data[m.end()]
        pos = m.end() + 1
        if code == 0xD9:  # EOI
            return None
        if code == 0x01 or 0xD0 <= code <= 0xD7:
            continue
        length = int.from_bytes(data[pos:pos + 2], "big")
        seg = data[pos + 2:pos + length]
        pos += length
        if len(seg) != length - 2:
            return None  # truncated: Pillow refuses it
        if code in (0xC0, 0xC1, 0xC2):
            if len(seg) < 6:
                return None
            height, width, nf = int.from_bytes(seg[1:3], "big"), int.from_bytes(seg[3:5], "big"), seg[5]
            comps = {seg[6 + 3 * i]: (seg[7 + 3 * i] >> 4, seg[7 + 3 * i] & 15) for i in range(nf)
                     if 8 + 3 * i < len(seg) + 1}
            if height == 0 or not comps or any(h < 1 or v < 1 for h, v in comps.values()):
                return None
            hmax, vmax = max(h for h, _ in comps.values()), max(v for _, v in comps.values())
            nz = {c: np.zeros(_ceil_div(_ceil_div(width * h, hmax), 8) * _ceil_div(_ceil_div(height * v, vmax), 8),
                              np.uint64) for c, (h, v) in comps.items()}
            frame = (code, width, height, comps, nz)
        elif code in (0xC3, 0xC5, 0xC6, 0xC7) or 0xC9 <= code <= 0xCF and code != 0xCC:
            return None  # lossless, hierarchical or arithmetic-coded: not walked
        elif code == 0xC4:
            i = 0
            while i + 17 <= len(seg):
                tc, th = seg[i] >> 4, seg[i] & 15
                counts = list(seg[i + 1:i + 17])
                symbols = list(seg[i + 17:i + 17 + sum(counts)])
                if tc > 1 or th > 3 or len(symbols) != sum(counts):
                    return "a damaged Huffman table"
                dht.add(tc * 4 + th)
                _fill(lut, slow, tc * 4 + th, np.asarray(counts, np.int64), np.asarray(symbols, np.int64))
                i += 17 + sum(counts)
        elif code == 0xDD and len(seg) >= 2:
            ri = int.from_bytes(seg[:2], "big")
        elif code == 0xDA:
            if frame is None:
                return None
            why, pos = _scan(data, pos, seg, frame, dht, (lut, slow), buffers, ri)
            if why:
                return why
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _scan(data, pos, header, frame, dht, coding, buffers, ri):
    """Walk the scan whose header is ``header`` and whose data start at ``pos``: ``(damage or None, where the
    scan's data end)``."""
    sof, width, height, comps, nz = frame
    ns = header[0] if header else 0
    if len(header) < 4 + 2 * ns or ns == 0:
        return None, len(data)
    members = [(header[1 + 2 * i], header[2 + 2 * i] >> 4, header[2 + 2 * i] & 15) for i in range(ns)]
    ss, se, ah = header[1 + 2 * ns], header[2 + 2 * ns], header[3 + 2 * ns] >> 4
    raw, out, piece_end, rst = buffers
    n_out, n_rst, end = _entropy(raw, pos, out, piece_end, rst)
    if any(c not in comps for c, _, _ in members):
        return "a scan of a component the frame does not have", end
    if sof != 0xC2:
        ss, se, ah = 0, 63, 0
    hmax = max(h for h, _ in comps.values())
    vmax = max(v for _, v in comps.values())
    if ns == 1:  # non-interleaved: an MCU is one block of the component
        h, v = comps[members[0][0]]
        cols = _ceil_div(_ceil_div(width * h, hmax), 8)
        rows = _ceil_div(_ceil_div(height * v, vmax), 8)
        plan = np.zeros(1, np.int64)
    else:
        cols, rows = _ceil_div(width, 8 * hmax), _ceil_div(height, 8 * vmax)
        plan = np.asarray([i for i, (c, _, _) in enumerate(members) for _ in range(comps[c][0] * comps[c][1])],
                          np.int64)
    tables = {}
    for i, (_, td, ta) in enumerate(members):
        need = ([td] if ss == 0 and ah == 0 else []) + ([4 + ta] if se > 0 else [])
        for t in need:
            if t not in dht:
                return "a scan that uses a Huffman table the file does not define", end
        tables[i] = (td, 4 + ta)
    n_mcu = cols * rows
    numbers = rst[:n_rst]
    if n_rst and (not ri or np.any(numbers != np.arange(n_rst) % 8)):
        return "its restart markers are out of order", end
    per = ri if ri else n_mcu
    if ri and n_rst + 1 != _ceil_div(n_mcu, ri):
        return "its restart markers do not match its size", end
    units = np.asarray([min(per, n_mcu - i * per) for i in range(n_rst + 1)], np.int64)
    ends = np.append(piece_end[:n_rst], n_out)
    starts = np.concatenate(([0], ends[:-1]))
    out[n_out:n_out + 3] = 0
    dc_t = np.asarray([tables[i][0] for i in range(ns)], np.int64)
    ac_t = np.asarray([tables[i][1] for i in range(ns)], np.int64)
    state = nz[members[0][0]] if ss > 0 else np.zeros(1, np.uint64)
    lut, slow = coding
    status, extra = _walk(out, starts, ends, units, plan, dc_t, ac_t, ss, se, ah, state, lut, slow)
    if status == 4 and extra <= EXTRA_BYTES_KEPT:
        status = 0
    if status:
        what = f"{extra} bytes after the last block" if status == 4 else _WHY[status]
        return f"compressed data damaged: {what}", end
    return None, end
