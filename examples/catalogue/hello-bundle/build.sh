#!/bin/sh
# The build: a program that names what it was built on (inputs.txt).
set -eu
mkdir -p out
{
  echo '#!/bin/sh'
  echo 'trap "exit 0" TERM INT'
  echo 'while :; do'
  sed 's/^/  echo "built on: /; s/$/"/' inputs.txt
  echo '  sleep 5 & wait $!'
  echo 'done'
} > out/hello-bundle
chmod 0755 out/hello-bundle
