# Shared by scripts/bench_floor, bench_cold and bench_first (sourced): one walk, a cold walk,
# and a median.

# walk grep|rg TOP: the bytes of what the walk finds under TOP ($word). The matches go
# through a pipe: GNU grep writing to /dev/null stops reading each file at its first match,
# which times the opens of a walk, not a grep.
walk() {
    if [ "$1" = grep ]; then grep -r "$word" "$2"; else rg --no-messages -uu "$word" "$2"; fi | wc -c
}

# cold grep|rg TOP: seconds of one walk ($word), the page cache dropped first (needs root).
cold() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
    /usr/bin/time -f %e bash -c "$(declare -f walk); word='$word'; walk $1 '$2'" 2>&1 >/dev/null | tail -1
}

# median: of the numbers on standard input (separated by spaces or lines).
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
