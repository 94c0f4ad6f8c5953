//go:build linux

// Command callcpu is the Go side of python/bench_call_cpu.py: a worker of
// the public package that makes --reps push+pulls of one float32 variable
// against the ps of TF_CONFIG (after 200 untimed ones) and prints one JSON
// line: the median call's microseconds and this process's CPU
// microseconds and voluntary context switches a call (getrusage).
//
//	go build -o /tmp/callcpu ./scripts/bench/callcpu
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/paramserv/paramserv"
)

func usage() (cpu time.Duration, nvcsw int64) {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano()), r.Nvcsw
}

func main() {
	reps := flag.Int("reps", 5000, "timed calls")
	flag.Parse()
	if err := run(*reps); err != nil {
		fmt.Fprintln(os.Stderr, "callcpu:", err)
		os.Exit(1)
	}
}

func run(reps int) error {
	if reps < 1 {
		return fmt.Errorf("--reps=%d: want at least 1", reps)
	}
	ctx := context.Background()
	w, err := paramserv.Start(ctx, paramserv.Config{
		Variables: []paramserv.Variable{{Name: "tiny", Shape: []int{1}}},
		Optimizer: paramserv.Optimizer{Name: "sgd", LearningRate: 1},
		Logf:      func(string, ...any) {},
	}, paramserv.Params{"tiny": {0}})
	if err != nil {
		return err
	}
	defer w.Close()
	g, p := paramserv.Params{"tiny": {1}}, paramserv.Params{"tiny": {0}}
	for range 200 {
		if _, err := w.PushPull(ctx, g, p); err != nil {
			return err
		}
	}
	times := make([]time.Duration, reps)
	cpu0, sw0 := usage()
	for i := range times {
		t := time.Now()
		if _, err := w.PushPull(ctx, g, p); err != nil {
			return err
		}
		times[i] = time.Since(t)
	}
	cpu1, sw1 := usage()
	slices.Sort(times)
	out, _ := json.Marshal(map[string]float64{
		"median_us":      float64(times[reps/2].Nanoseconds()) / 1e3,
		"cpu_us":         float64((cpu1 - cpu0).Nanoseconds()) / 1e3 / float64(reps),
		"nvcsw_per_call": float64(sw1-sw0) / float64(reps),
	})
	fmt.Println(string(out))
	return w.Done(ctx)
}
