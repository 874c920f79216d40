#!/bin/sh
# Rebuild eval/heldout/pdfs (next to this script) from the Debian (bookworm) packages. Needs apt-get, dpkg-deb, md5sum.
set -eu
OUT="$(cd "$(dirname "$0")" && pwd)/pdfs"
TMP="$(mktemp -d)"
cd "$TMP"
apt-get download r-doc-pdf=4.2.2.20221110-2 \
                 texlive-latex-base-doc=2022.20230122-3 \
                 texlive-latex-extra-doc=2022.20230122-4 \
                 texlive-lang-german=2022.20230122-1
for d in *.deb; do n="${d%%_*}"; mkdir -p "x/$n"; dpkg-deb -x "$d" "x/$n"; done
mkdir -p "$OUT"
cp x/r-doc-pdf/usr/share/R/doc/manual/R-admin.pdf "$OUT/"
cp x/texlive-latex-base-doc/usr/share/doc/texlive-doc/latex/geometry/geometry.pdf "$OUT/"
cp x/texlive-latex-base-doc/usr/share/doc/texlive-doc/latex/fancyhdr/fancyhdr.pdf "$OUT/"
cp x/texlive-latex-extra-doc/usr/share/doc/texlive-doc/latex/enumitem/enumitem.pdf "$OUT/"
cp x/texlive-lang-german/usr/share/doc/texlive-doc/latex/booktabs-de/booktabs-de.pdf "$OUT/"
cd "$OUT"
rm -rf "$TMP"
md5sum -c <<'MD5'
68294b8a155f53207a88a4d593819b57  R-admin.pdf
5f97b6d5cb3aa2f74e0de83fbb248507  geometry.pdf
06b71beee67e9ead237616b3b277d194  fancyhdr.pdf
c032bd62cd0141fc3cd82b0d358485fe  enumitem.pdf
42ae7a7683ea9781a55de26febcf9c5b  booktabs-de.pdf
MD5
