#!/bin/sh
# A committed replay table (search/bench/data/) stays readable by both of bo_bench's replays, and
# search/bench/table_noise_report.py's restated scoring equals bo_bench's own scores of it, so neither the table nor
# the report can drift from the search unnoticed.
#   check_committed_table.sh BO_BENCH REPORT TABLE OUT_PREFIX FIDELITY_LINE NOISE
# FIDELITY_LINE: a grep pattern the fidelity replay's first line must match (the configs and targets the table was
# committed with), or - to skip the fidelity replay; NOISE: noise (the report measures timing noise) or no-noise
# (the table has no repeats, and the report must say so).
set -eu
bo="$1" report="$2" table="$3" out="$4" line="$5" noise="$6"
rows=$(($(wc -l <"$table") - 1))
if [ "$line" != - ]; then
  "$bo" --landscape fidelity --fidelity-table "$table" --seeds 2 --budget "$rows" >"$out.fidelity.txt"
  grep -q "$line" "$out.fidelity.txt"
fi
"$bo" --landscape replay --replay-table "$table" --seeds 2 --budget 30 --random-budget 100 >/dev/null
"$bo" --landscape replay --replay-table "$table" --export-landscape "$out.export.csv" >/dev/null
python3 "$report" "$table" --check-export "$out.export.csv" >"$out.report.txt"
case "$noise" in
  noise) ! grep -q 'Timing noise between repeats: not measured' "$out.report.txt" ;;
  no-noise) grep -q 'Timing noise between repeats: not measured' "$out.report.txt" ;;
  *) echo "NOISE: '$noise' is not one of noise, no-noise" >&2; exit 2 ;;
esac
