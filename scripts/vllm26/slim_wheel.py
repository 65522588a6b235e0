"""Rewrite a wheel without the paths listed in a drop file, stored uncompressed, with RECORD fixed.

    python3 slim_wheel.py IN.whl OUT_DIR/ drop.txt

Stored (not deflated) so that the outer xz compresses across the whole wheel.
"""

import csv
import io
import sys
import zipfile
from pathlib import Path


def main(src: str, out_dir: str, drop_file: str) -> None:
    prefixes = [line.strip().rstrip("/") for line in Path(drop_file).read_text().splitlines()]
    prefixes = [p for p in prefixes if p and not p.startswith("#")]

    def dropped(name: str) -> bool:
        return any(name == p or name.startswith(p + "/") for p in prefixes)

    dst = Path(out_dir) / Path(src).name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as zout:
        record = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        kept = [i for i in zin.infolist() if i.filename != record and not dropped(i.filename)]
        gone = [i for i in zin.infolist() if i.filename != record and dropped(i.filename)]
        names = {i.filename for i in kept}
        rows = [r for r in csv.reader(io.StringIO(zin.read(record).decode())) if r and r[0] in names]
        rows.append([record, "", ""])
        for info in kept:
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            zi.external_attr = info.external_attr
            zout.writestr(zi, zin.read(info.filename), compress_type=zipfile.ZIP_STORED)
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        zi = zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zout.writestr(zi, text.getvalue(), compress_type=zipfile.ZIP_STORED)
    print(f"dropped {len(gone)} files ({sum(i.file_size for i in gone) / 1e6:.1f} MB raw), kept {len(kept)}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
