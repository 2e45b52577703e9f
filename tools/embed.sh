#!/bin/sh
# embed.sh NAME FILE — print a C file defining `const char NAME[]` holding FILE's text and a NUL.
# Written as a byte list: ISO C caps string literals at 4095 characters (-Woverlength-strings).
name=$1; file=$2
echo "/* generated from $file by tools/embed.sh: do not edit */"
echo "const char $name[] __attribute__((visibility(\"hidden\"))) = {"
od -An -v -td1 "$file" | sed -e 's/^ */    /' -e 's/  */, /g' -e 's/$/,/' -e 's/^, /    /'
echo "    0};"
