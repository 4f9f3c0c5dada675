package eventstats

import "math"

// histogram counts latencies in logarithmic buckets: bucket 0 holds what
// is below histBase, bucket i ≥ 1 [histBase·f^(i-1), histBase·f^i) with f =
// histFactor, the last one everything above. A quantile is the geometric
// middle of its bucket, within about 10 % of the true value.
type histogram [histBuckets]uint32

const (
	histBuckets = 96
	histBase    = 0.01 // ms
	histFactor  = 1.2  // 0.01 ms · 1.2^94 ≈ 280 s in the last bounded bucket
)

var logFactor = math.Log(histFactor)

func (h *histogram) add(ms float64) {
	i := 0
	if ms >= histBase {
		i = min(int(math.Log(ms/histBase)/logFactor)+1, histBuckets-1)
	}
	h[i]++
}

func (h *histogram) merge(o *histogram) {
	for i, n := range o {
		h[i] += n
	}
}

// quantile returns the q-quantile in ms, 0 for an empty histogram.
func (h *histogram) quantile(q float64) float64 {
	var n uint64
	for _, c := range h {
		n += uint64(c)
	}
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h {
		seen += uint64(c)
		if seen >= rank {
			if i == 0 {
				return histBase / 2
			}
			// the geometric middle of [base·f^(i-1), base·f^i)
			return histBase * math.Pow(histFactor, float64(i)-0.5)
		}
	}
	return histBase * math.Pow(histFactor, histBuckets-1.5)
}
