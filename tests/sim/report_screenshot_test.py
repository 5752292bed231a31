#!/usr/bin/env python3
"""The `kiln simulate --report` page renders in a browser.

Runs `kiln simulate SCENARIO --report`, screenshots the page with headless
Chromium, and checks the PNG: the window's size, not blank, and pixels of
every policy's colour (as the page's table gives them). Exits 77 (skipped)
when no chromium is installed; never passes without looking at the page.

Usage: report_screenshot_test.py KILN SCENARIO
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77
WIDTH, HEIGHT = 1200, 3000


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, color_type, _, _, interlace = header
    if depth != 8 or color_type not in (2, 6) or interlace:
        raise ValueError(f"unexpected PNG format: depth {depth}, colour type {color_type}, interlace {interlace}")
    bpp = 3 if color_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def main():
    kiln, scenario = sys.argv[1], sys.argv[2]
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("SKIP: no chromium on PATH (Debian: apt-get install chromium; cmake/install-deps.sh lists it)")
        return SKIP
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        page, shot = os.path.join(tmp, "report.html"), os.path.join(tmp, "report.png")
        subprocess.run([kiln, "simulate", scenario, "--report", page], check=True, stdout=subprocess.DEVNULL)
        with open(page, encoding="utf-8") as f:
            html = f.read()
        # Each policy's colour, from the table's rows.
        colours = dict(re.findall(r'color:(#[0-9a-f]{6})">&#9632;</span>&nbsp;([^<]+)</td>', html))
        if len(colours) < 2:
            failures.append(f"the page's table gives {len(colours)} policy colours")
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp}/profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
             "file://" + page],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, cwd=tmp)
        if not os.path.exists(shot):
            print("FAIL chromium wrote no screenshot")
            return 1
        width, height, rows = read_png(shot)
        if (width, height) != (WIDTH, HEIGHT):
            failures.append(f"screenshot is {width}x{height}, not {WIDTH}x{HEIGHT}")
        counts = {}
        for row in rows:
            for px in row:
                counts[px] = counts.get(px, 0) + 1
        total = width * height
        inked = total - counts.get((255, 255, 255), 0)
        print(f"screenshot {width}x{height}: {len(counts)} distinct colours, {100.0 * inked / total:.1f}% not white")
        if len(counts) < 50:
            failures.append(f"only {len(counts)} distinct colours: blank or unstyled")
        if inked < total // 50:
            failures.append(f"only {inked} of {total} pixels are not white: blank")
        for colour, policy in colours.items():
            rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
            n = counts.get(rgb, 0)
            print(f"  {policy}: {n} pixels of {colour}")
            if n < 50:
                failures.append(f"{policy}: only {n} pixels of its colour {colour}")
    for f in failures:
        print("FAIL " + f)
    if not failures:
        print("ok   the report renders: right size, not blank, every policy's colour drawn")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
