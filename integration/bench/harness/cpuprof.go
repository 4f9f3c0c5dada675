package harness

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"time"
)

// Components, as pprof labels on the goroutines of each part of the system
// under test. Goroutines inherit the labels of the goroutine that starts
// them, so labelling the code that connects and subscribes labels the
// connection's read and flush loops, the subscription handlers and every
// goroutine those start.
const (
	labelKey      = "component"
	CompServer    = "nats-server"
	CompDispatch  = "dispatcher"
	CompAgents    = "agents"
	compGC        = "gc" // background GC work, which no label reaches
	CompUnlabeled = ""   // load generator, simulation, runtime
)

// Labelled runs fn with the component label set, so that goroutines it
// starts carry it. fn gets the labelled context: a labelled call nested in
// fn must start from it, since the goroutine's labels are reset to those of
// the context passed in when labelled returns.
func Labelled(ctx context.Context, component string, fn func(ctx context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelKey, component), fn)
}

// CPUByComponent profiles the process's CPU while fn runs and returns the
// CPU time per component label. It returns a nil map (and fn's error) when
// the process is already being profiled.
func CPUByComponent(fn func() error) (map[string]time.Duration, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, fn()
	}
	err := fn()
	pprof.StopCPUProfile()
	if err != nil {
		return nil, err
	}
	byComp, perr := parseCPUProfile(&buf)
	if perr != nil {
		return nil, nil // an unreadable profile only loses the breakdown
	}
	return byComp, nil
}

// Share returns the CPU of component c in cores over wall time el (see
// ownCPU).
func Share(byComp map[string]time.Duration, c string, el time.Duration) float64 {
	return OwnCPU(byComp, c).Seconds() / el.Seconds()
}

// OwnCPU returns the CPU of component c with background GC work split
// among the components in proportion to their other CPU.
func OwnCPU(byComp map[string]time.Duration, c string) time.Duration {
	var total time.Duration
	for k, v := range byComp {
		if k != compGC {
			total += v
		}
	}
	own := byComp[c]
	if total > 0 {
		own += time.Duration(float64(byComp[compGC]) * float64(own) / float64(total))
	}
	return own
}

// parseCPUProfile reads a gzipped profile.proto written by runtime/pprof
// and sums the CPU nanoseconds of its samples by the value of the
// "component" label; samples whose stack holds runtime.gcBgMarkWorker are
// summed under compGC. Only the few fields needed are decoded.
func parseCPUProfile(r io.Reader) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	type sample struct {
		locs   []uint64
		values []int64
		labels [][2]int64 // key, str (string table indexes)
	}
	var (
		samples   []sample
		strs      []string
		locFuncs  = map[uint64][]uint64{} // location id → function ids
		funcNames = map[uint64]int64{}    // function id → name index
	)
	err = eachField(raw, func(num int, wire int, v uint64, b []byte) error {
		switch num {
		case 2: // sample
			var s sample
			err := eachField(b, func(num int, wire int, v uint64, b []byte) error {
				switch num {
				case 1:
					s.locs = appendUints(s.locs, wire, v, b)
				case 2:
					for _, u := range appendUints(nil, wire, v, b) {
						s.values = append(s.values, int64(u))
					}
				case 3:
					var kv [2]int64
					err := eachField(b, func(num int, _ int, v uint64, _ []byte) error {
						if num == 1 || num == 2 {
							kv[num-1] = int64(v)
						}
						return nil
					})
					s.labels = append(s.labels, kv)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 4: // location
			var id uint64
			var fns []uint64
			err := eachField(b, func(num int, _ int, v uint64, b []byte) error {
				switch num {
				case 1:
					id = v
				case 4: // line
					return eachField(b, func(num int, _ int, v uint64, _ []byte) error {
						if num == 1 {
							fns = append(fns, v)
						}
						return nil
					})
				}
				return nil
			})
			locFuncs[id] = fns
			return err
		case 5: // function
			var id uint64
			var name int64
			err := eachField(b, func(num int, _ int, v uint64, _ []byte) error {
				switch num {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			funcNames[id] = name
			return err
		case 6: // string table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if len(s.values) < 2 {
			continue
		}
		comp := CompUnlabeled
		for _, kv := range s.labels {
			if str(kv[0]) == labelKey {
				comp = str(kv[1])
			}
		}
		if comp == CompUnlabeled {
		stack:
			for _, l := range s.locs {
				for _, fid := range locFuncs[l] {
					if str(funcNames[fid]) == "runtime.gcBgMarkWorker" {
						comp = compGC
						break stack
					}
				}
			}
		}
		out[comp] += time.Duration(s.values[1])
	}
	return out, nil
}

// appendUints appends a repeated varint field, packed (wire type 2) or not.
func appendUints(dst []uint64, wire int, v uint64, b []byte) []uint64 {
	if wire != 2 {
		return append(dst, v)
	}
	for len(b) > 0 {
		u, n := uvarint(b)
		if n <= 0 {
			break
		}
		dst = append(dst, u)
		b = b[n:]
	}
	return dst
}

// eachField calls fn for every field of a protobuf message: varints get v,
// length-delimited fields get b; fixed-width fields are skipped.
func eachField(b []byte, fn func(num, wire int, v uint64, b []byte) error) error {
	for len(b) > 0 {
		key, n := uvarint(b)
		if n <= 0 {
			return errors.New("profile: bad field key")
		}
		b = b[n:]
		num, wire := int(key>>3), int(key&7)
		switch wire {
		case 0:
			v, n := uvarint(b)
			if n <= 0 {
				return errors.New("profile: bad varint")
			}
			b = b[n:]
			if err := fn(num, wire, v, nil); err != nil {
				return err
			}
		case 1:
			if len(b) < 8 {
				return errors.New("profile: short fixed64")
			}
			b = b[8:]
		case 2:
			l, n := uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("profile: bad length")
			}
			if err := fn(num, wire, 0, b[n:n+int(l)]); err != nil {
				return err
			}
			b = b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errors.New("profile: short fixed32")
			}
			b = b[4:]
		default:
			return fmt.Errorf("profile: wire type %d", wire)
		}
	}
	return nil
}

func uvarint(b []byte) (uint64, int) { return binary.Uvarint(b) }
