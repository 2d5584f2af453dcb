#!/bin/sh
# The build: the program with the version it was built from written in.
# Runs in a clean checkout with a clean environment; MESH_BUILD_VERSION is
# the commit.
set -eu
mkdir -p out
sed "s/@VERSION@/${MESH_BUILD_VERSION}/" hello.in > out/hello
chmod 0755 out/hello
echo "built out/hello at ${MESH_BUILD_VERSION}"
