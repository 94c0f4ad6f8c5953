package mf

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRatings(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("1\t2\t5\t881250949\n\n3 4 1.5\n"), 0o644)
	rs, err := ReadRatings(good)
	if err != nil || len(rs) != 2 || rs[0] != (Rating{1, 2, 5}) || rs[1] != (Rating{3, 4, 1.5}) {
		t.Fatalf("ReadRatings = %v, %v", rs, err)
	}
	for name, text := range map[string]string{
		"short":   "1\t2\t5\n1\t2\n",
		"letters": "1\t2\t5\n1\tb\t5\n",
		"nan":     "1\t2\t5\n1\t2\tNaN\n",
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(text), 0o644)
		_, err := ReadRatings(path)
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), path+":2") {
			t.Errorf("%s: err = %v, want ErrInput naming %s:2", name, err, path)
		}
	}
	if _, err := ReadRatings(filepath.Join(dir, "none")); !errors.Is(err, ErrInput) {
		t.Errorf("missing file: err = %v, want ErrInput", err)
	}
}

// The gradient of one rating is that of ½e² + ½λ|p|² + ½λ_b b² for each
// side, and μ's is e.
func TestGradients(t *testing.T) {
	m := newModel(Config{Dim: 2, Reg: 0.1, BiasReg: 0.01}.Defaults())
	batch := []Rating{{User: 7, Item: 9, Value: 4}}
	m.gather(batch)
	copy(m.uRows, []float32{1, 2, 0.5}) // p, b_u
	copy(m.iRows, []float32{0.5, -1, 0.25})
	g := map[string][]float32{"mu": {0}}
	se := m.gradients(batch, 3, g)
	// r̂ = 3 + 0.5 + 0.25 + (0.5 - 2) = 2.25, e = -1.75
	want := []float32{-1.75*0.5 + 0.1, -1.75*-1 + 0.2, -1.75 + 0.005}
	for j, w := range want {
		if d := m.uGrad[j] - w; d > 1e-6 || d < -1e-6 {
			t.Errorf("user gradient %v, want %v", m.uGrad, want)
			break
		}
	}
	wantI := []float32{-1.75*1 + 0.05, -1.75*2 - 0.1, -1.75 + 0.0025}
	for j, w := range wantI {
		if d := m.iGrad[j] - w; d > 1e-6 || d < -1e-6 {
			t.Errorf("item gradient %v, want %v", m.iGrad, wantI)
			break
		}
	}
	if g["mu"][0] != -1.75 || se != 1.75*1.75 {
		t.Errorf("mu gradient %v, squared error %v; want -1.75 and %v", g["mu"][0], se, 1.75*1.75)
	}
}

// A row's penalty per rating is Reg·(n/n̄)^-RegExponent: Reg at the mean
// count, half of it at four times the mean with the default 0.5.
func TestRegWeighedByCount(t *testing.T) {
	m := newModel(Config{Reg: 0.1}.Defaults())
	var train []Rating
	for i := range 4 {
		train = append(train, Rating{User: 1, Item: uint64(10 + i)}) // user 1: 4 ratings
	}
	train = append(train, Rating{User: 2, Item: 10}, Rating{User: 3, Item: 10}, Rating{User: 4, Item: 10}, Rating{User: 5, Item: 11},
		Rating{User: 5, Item: 12}, Rating{User: 5, Item: 13}) // 10 ratings, 5 users: mean 2
	m.weighReg(train)
	near := func(got, want float64) bool { return got > want-1e-6 && got < want+1e-6 }
	if got := float64(m.regOf(m.userReg, 2)); !near(got, 0.1*math.Sqrt(2)) {
		t.Errorf("user 2 (1 rating): penalty %v, want %v", got, 0.1*math.Sqrt(2))
	}
	if got := float64(m.regOf(m.userReg, 1)); !near(got, 0.1*math.Sqrt(2.0/4)) {
		t.Errorf("user 1 (4 ratings): penalty %v, want %v", got, 0.1*math.Sqrt(2.0/4))
	}
	if got := m.regOf(m.userReg, 99); got != float32(0.1) {
		t.Errorf("a user without training ratings: penalty %v, want Reg", got)
	}
	plain := newModel(Config{Reg: 0.1, RegExponent: -1}.Defaults())
	plain.weighReg(train)
	if got := plain.regOf(plain.userReg, 1); got != float32(0.1) {
		t.Errorf("RegExponent -1: penalty %v, want Reg", got)
	}
}

// With implicit feedback the gradient of every row (users', items' and
// the implicit rows y_j of the items the batch's users rated) is that of
// the objective gradients documents, checked by central differences.
func TestImplicitGradients(t *testing.T) {
	const reg, biasReg = 0.1, 0.01
	m := newModel(Config{Dim: 2, Reg: reg, BiasReg: biasReg}.Defaults())
	train := []Rating{{1, 10, 4}, {1, 11, 3}, {2, 10, 5}}
	m.rateds(train)
	batch := []Rating{{1, 10, 4}, {2, 11, 2}, {1, 11, 3}}
	m.gather(batch)
	copy(m.uRows, []float32{0.3, -0.2, 0.1, 0.5, 0.4, -0.1})
	copy(m.iRows, []float32{0.2, 0.6, 0.05, -0.3, 0.1, 0.2})
	if len(m.implKeys) != 2 {
		t.Fatalf("implicit rows %v, want the 2 items users 1 and 2 rated", m.implKeys)
	}
	copy(m.yRows, []float32{0.7, -0.4, 0.25, 0.9})
	const mu = 3.5
	rated := map[uint64][]uint64{1: {10, 11}, 2: {10}}
	// loss is the objective, computed here from its definition.
	loss := func() float64 {
		row := func(rows []float32, keys []uint64, key uint64, n int) []float32 {
			for i, k := range keys {
				if k == key {
					return rows[i*n : (i+1)*n]
				}
			}
			t.Fatalf("no row %d", key)
			return nil
		}
		var l float64
		for _, r := range batch {
			p, q := row(m.uRows, m.users.keys, r.User, 3), row(m.iRows, m.items.keys, r.Item, 3)
			n := rated[r.User]
			sc := 1 / math.Sqrt(float64(len(n)))
			z := make([]float64, 2)
			var ySq float64
			for _, j := range n {
				y := row(m.yRows, m.implKeys, j, 2)
				for c := range z {
					z[c] += sc * float64(y[c])
					ySq += float64(y[c]) * float64(y[c])
				}
			}
			pred := mu + float64(p[2]+q[2])
			var pSq, qSq float64
			for c := range 2 {
				pred += (float64(p[c]) + z[c]) * float64(q[c])
				pSq += float64(p[c]) * float64(p[c])
				qSq += float64(q[c]) * float64(q[c])
			}
			e := pred - float64(r.Value)
			l += e*e/2 + reg/2*(pSq+qSq) + biasReg/2*float64(p[2]*p[2]+q[2]*q[2]) + reg/2*sc*ySq
		}
		return l
	}
	g := map[string][]float32{"mu": {0}}
	m.gradients(batch, mu, g)
	for _, c := range []struct {
		name       string
		rows, grad []float32
	}{{"user", m.uRows, m.uGrad}, {"item", m.iRows, m.iGrad}, {"implicit", m.yRows, m.yGrad}} {
		for i := range c.rows {
			const h = 1e-3
			v, vu, vd := c.rows[i], c.rows[i]+h, c.rows[i]-h
			c.rows[i] = vu
			up := loss()
			c.rows[i] = vd
			down := loss()
			c.rows[i] = v
			want := (up - down) / (float64(vu) - float64(vd))
			if d := float64(c.grad[i]) - want; math.Abs(d) > 1e-3*max(1, math.Abs(want)) {
				t.Errorf("%s row value %d: gradient %v, central difference %v", c.name, i, c.grad[i], want)
			}
		}
	}
}
