package sparse

import (
	"slices"
	"testing"
)

// FuzzTable decodes the input into a table configuration and a sequence of
// pulls, pushes, evictions and checkpoint round trips over a pool of 64
// keys, runs them on a table and on the reference, and fails on any
// difference or a broken index.
func FuzzTable(f *testing.F) {
	pool := keyPool(f, 64, 1<<12, 1)
	f.Add([]byte{0x00, 0, 3, 1, 2, 3, 3, 2, 1, 2, 9, 9, 6, 3})
	f.Add([]byte{0x17, 3, 5, 1, 2, 3, 4, 5, 0, 4, 1, 2, 3, 4, 6, 2, 7, 0, 3, 1, 7})
	f.Add([]byte{0xb6, 4, 8, 10, 20, 30, 40, 50, 60, 63, 62, 1, 2, 3, 4, 5, 6, 7, 8, 9, 6, 1, 6, 2, 6, 3, 5, 3, 63, 62, 61, 1, 1})
	f.Add([]byte{0x5f, 3, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, 7, 0, 1, 2, 3, 4, 5, 6, 6, 3, 6, 3, 7, 0, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 4096 {
			return
		}
		c := data[0]
		cfg := Config{
			Dim:             1 + int(c&3),
			MinCount:        int(c>>2) & 3,
			SketchWidth:     1 << 12,
			EvictAfterSteps: int64(c>>4&3) * 2,
			Rule:            plainRule{1},
		}
		if c&0x40 != 0 {
			cfg.MaxRows = 20
		}
		if c&0x80 != 0 {
			cfg.Rule = stepRule{}
		}
		tb, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(cfg)
		in := data[1:]
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return int(b)
		}
		step := int64(0)
		for len(in) > 0 {
			o := op{}
			switch code := next() % 8; {
			case code < 3:
				o.kind = 'l'
				for range next() % 9 {
					o.keys = append(o.keys, pool[next()%len(pool)])
				}
			case code < 6:
				o.kind = 'p'
				for range next() % 9 {
					if k := pool[next()%len(pool)]; !slices.Contains(o.keys, k) {
						o.keys = append(o.keys, k)
					}
				}
				for range len(o.keys) * cfg.Dim {
					o.grads = append(o.grads, float32(int8(next()))/16)
				}
				step += int64(next() % 3)
				o.step = step
			case code == 6:
				o.kind = 'e'
				step += int64(next() % 4)
				o.step = step
			default:
				o.kind = 'x'
			}
			tb = runOp(t, tb, ref, o)
		}
		checkSame(t, tb, ref)
	})
}
