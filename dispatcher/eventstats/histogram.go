package eventstats

import "math"

// histogram counts latencies in logarithmic buckets: bucket 0 holds what
// is below histBase, bucket i ≥ 1 [histBase·f^(i-1), histBase·f^i) with f =
// histFactor, the last one everything above. A quantile is the geometric
// middle of its bucket, within about 10 % of the true value, kept within
// the smallest and largest value seen; the top rank is the largest (so
// one sample is exact).
type histogram struct {
	counts   [histBuckets]uint32
	n        uint64
	min, max float64
}

const (
	histBuckets = 96
	histBase    = 0.01 // ms
	histFactor  = 1.2  // 0.01 ms · 1.2^94 ≈ 280 s in the last bounded bucket
)

var logFactor = math.Log(histFactor)

func (h *histogram) add(ms float64) {
	if h.n == 0 || ms < h.min {
		h.min = ms
	}
	if h.n == 0 || ms > h.max {
		h.max = ms
	}
	h.n++
	i := 0
	if ms >= histBase {
		i = min(int(math.Log(ms/histBase)/logFactor)+1, histBuckets-1)
	}
	h.counts[i]++
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.n == 0 || o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	for i, n := range o.counts {
		h.counts[i] += n
	}
}

// quantile returns the q-quantile in ms, 0 for an empty histogram.
func (h *histogram) quantile(q float64) float64 {
	n := h.n
	if n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(n))), 1)
	if rank >= n {
		return h.max
	}
	var seen uint64
	v := histBase * math.Pow(histFactor, histBuckets-1.5)
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			v = histBase / 2
			if i > 0 { // the geometric middle of [base·f^(i-1), base·f^i)
				v = histBase * math.Pow(histFactor, float64(i)-0.5)
			}
			break
		}
	}
	return min(max(v, h.min), h.max)
}
