#!/usr/bin/env bash
# Warns loudly when the file system holding DIR has less than GB gigabytes free: the venv
# (torch with its CUDA libraries, TensorFlow, JAX, Ray: about 9 GB) and cargo's target folder
# (about 12 GB after `make test`) otherwise fail halfway with "No space left on device".
#   scripts/check-disk.sh DIR GB WHAT
set -euo pipefail
dir=$1 need=$2 what=$3
free_kb=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
free_gb=$((free_kb / 1024 / 1024))
if ((free_gb < need)); then
  echo "################################################################################"
  echo "## WARNING: $what needs about $need GB free on the disk of $dir; $free_gb GB are."
  echo "## Free some space (an old clone's .venv and target/ take ~20 GB) or expect"
  echo "## 'No space left on device' below."
  echo "################################################################################"
fi
