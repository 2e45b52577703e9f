#!/bin/sh
# embed.sh NAME FILE — print a C file defining `const char NAME[]` holding FILE's text.
name=$1; file=$2
echo "/* generated from $file by tools/embed.sh: do not edit */"
echo "const char $name[] __attribute__((visibility(\"hidden\"))) ="
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$/\\n"/' "$file"
echo ";"
