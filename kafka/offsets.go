package kafka

import (
	"sort"
	"strconv"
	"strings"
)

// The commit metadata of a partition records what its committed offset
// alone cannot: the offsets settled beyond it, the attempts of the
// unsettled ones and the due times of held ones. It is text:
//
//	bk1|d=<offsets>|w=<offset>:<due>,...|a=<offset>:<attempts>,...
//
// with offsets relative to the committed one (ranges as a-b), due times in
// Unix milliseconds. The sections go in that order, each cut where the
// whole would pass metaLimit: a settled offset left out is delivered
// again after a rebalance, an attempt count left out restarts at 1.
const (
	metaVersion = "bk1"
	metaLimit   = 3800 // under the broker's default offset.metadata.max.bytes (4096)
)

// partMeta is what a partition's commit metadata says.
type partMeta struct {
	done     map[int64]bool
	due      map[int64]int64
	attempts map[int64]int
}

// encodeMeta writes the metadata of a partition committed at c.
func encodeMeta(c int64, done map[int64]bool, due map[int64]int64, attempts map[int64]int) string {
	var b strings.Builder
	b.WriteString(metaVersion)
	add := func(s string) bool {
		if b.Len()+len(s) > metaLimit {
			return false
		}
		b.WriteString(s)
		return true
	}
	if len(done) > 0 {
		offs := sortedKeys(done)
		sec := "|d="
		for i := 0; i < len(offs); {
			j := i
			for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
				j++
			}
			item := strconv.FormatInt(offs[i]-c, 10)
			if j > i {
				item += "-" + strconv.FormatInt(offs[j]-c, 10)
			}
			if sec == "" {
				item = "," + item
			}
			if !add(sec + item) {
				break
			}
			sec = ""
			i = j + 1
		}
	}
	for _, s := range []struct {
		tag string
		m   map[int64]int64
	}{{"|w=", due}, {"|a=", intMap(attempts)}} {
		sec := s.tag
		for _, off := range sortedKeys(s.m) {
			item := strconv.FormatInt(off-c, 10) + ":" + strconv.FormatInt(s.m[off], 10)
			if sec == "" {
				item = "," + item
			}
			if !add(sec + item) {
				break
			}
			sec = ""
		}
	}
	return b.String()
}

// decodeMeta reads the metadata of a partition committed at c; metadata
// the backend did not write reads as none.
func decodeMeta(c int64, s string) partMeta {
	m := partMeta{done: map[int64]bool{}, due: map[int64]int64{}, attempts: map[int64]int{}}
	secs := strings.Split(s, "|")
	if len(secs) == 0 || secs[0] != metaVersion {
		return m
	}
	for _, sec := range secs[1:] {
		tag, body, ok := strings.Cut(sec, "=")
		if !ok || body == "" {
			continue
		}
		for item := range strings.SplitSeq(body, ",") {
			switch tag {
			case "d":
				lo, hi, isRange := strings.Cut(item, "-")
				a, err := strconv.ParseInt(lo, 10, 64)
				if err != nil {
					continue
				}
				z := a
				if isRange {
					if z, err = strconv.ParseInt(hi, 10, 64); err != nil || z < a || z-a > 1<<20 {
						continue
					}
				}
				for o := a; o <= z; o++ {
					m.done[c+o] = true
				}
			case "w", "a":
				k, v, ok := strings.Cut(item, ":")
				if !ok {
					continue
				}
				o, err1 := strconv.ParseInt(k, 10, 64)
				n, err2 := strconv.ParseInt(v, 10, 64)
				if err1 != nil || err2 != nil {
					continue
				}
				if tag == "w" {
					m.due[c+o] = n
				} else if n > 0 && n < 1<<30 {
					m.attempts[c+o] = int(n)
				}
			}
		}
	}
	return m
}

func sortedKeys[V any](m map[int64]V) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func intMap(m map[int64]int) map[int64]int64 {
	out := make(map[int64]int64, len(m))
	for k, v := range m {
		out[k] = int64(v)
	}
	return out
}
