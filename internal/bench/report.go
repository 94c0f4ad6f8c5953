package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes r as one line of JSON.
func WriteJSON(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteTable writes results as a table for people, and the memory case,
// if any, as lines below it.
func WriteTable(w io.Writer, results []Result) error {
	if len(results) == 0 {
		return nil
	}
	first := results[0]
	base := "TCP baseline"
	if first.BaselineApplies {
		base = "TCP baseline applying the gradients with sgd (dense)"
	}
	fmt.Fprintf(w, "ps=%d workers=%d; times of worker 0; GB/s = payload bytes / median (GB = 1e9 B); ratio = median / %s median; cpu ratio = ps CPU / baseline server CPU per op\n", first.PS, first.Workers, base)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"case", "op", "size", "payload", "median ms", "p90 ms", "min ms", "max ms", "GB/s", "keys/s"}
	if first.Workers > 1 {
		header = append(header, "agg GB/s", "agg ops/s")
	}
	header = append(header, "baseline ms", "ratio", "cpu ratio", "ps RSS MiB", "verified", "")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	var mems []Result
	for _, r := range results {
		if r.MemReport != nil {
			mems = append(mems, r)
		}
		cells := []string{r.Case, r.Op, sizeOf(r), payloadOf(r.PayloadBytes),
			f3(r.MedianMS), f3(r.P90MS), f3(r.MinMS), f3(r.MaxMS), f3(r.GBPerS), keysRate(r)}
		if first.Workers > 1 {
			cells = append(cells, f3(r.AggGBPerS), fmt.Sprintf("%.0f", r.AggOpsPerS))
		}
		cpu := "-"
		if r.CPURatioToBaseline > 0 {
			cpu = fmt.Sprintf("%.2fx", r.CPURatioToBaseline)
		}
		cells = append(cells, f3(r.BaselineMedianMS), fmt.Sprintf("%.2fx", r.RatioToBaseline), cpu, fmt.Sprintf("%.0f", r.PSRSSMB), fmt.Sprint(r.Verified), "")
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range mems {
		m := r.MemReport
		fmt.Fprintf(w, "\nmemory: %d pushpulls of %s dense + %s keys x %d (after %d warm-up ones):\n", m.Ops, FormatBytes(r.Bytes), FormatKeys(r.Keys), r.Dim, r.Warmup)
		for i := range m.PSRSSGrowthKB {
			fmt.Fprintf(w, "  ps%d RSS %d KiB -> %d KiB (%+d KiB)\n", i, m.PSRSSBeforeKB[i], m.PSRSSAfterKB[i], m.PSRSSGrowthKB[i])
		}
		fmt.Fprintf(w, "  bench live heap %d KiB -> %d KiB (%+d KiB); bench RSS %d KiB -> %d KiB; %d B and %d allocations per op (all workers)\n",
			m.BenchHeapBeforeKB, m.BenchHeapAfterKB, m.BenchHeapGrowthKB, m.BenchRSSBeforeKB, m.BenchRSSAfterKB, m.BenchAllocPerOp, m.BenchMallocsPerOp)
		fmt.Fprintf(w, "  median %.3f ms, verified %v\n", r.MedianMS, r.Verified)
	}
	return nil
}

func sizeOf(r Result) string {
	switch Kind(r.Case) {
	case Sparse:
		return fmt.Sprintf("%sx%d", FormatKeys(r.Keys), r.Dim)
	case Mem:
		return fmt.Sprintf("%s+%sx%d", FormatBytes(r.Bytes), FormatKeys(r.Keys), r.Dim)
	}
	s := FormatBytes(r.Bytes)
	if r.Parts > 1 {
		s += fmt.Sprintf("/%d", r.Parts)
	}
	return s
}

// payloadOf writes n exactly in MiB where it is whole, otherwise in
// decimal units (the sparse sizes are multiples of 10^k keys).
func payloadOf(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return FormatBytes(n)
	case n >= 1e6:
		return fmt.Sprintf("%.1fMB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fkB", float64(n)/1e3)
	}
	return fmt.Sprintf("%dB", n)
}

func keysRate(r Result) string {
	if r.KeysPerS == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g", r.KeysPerS)
}

func f3(x float64) string {
	switch {
	case x == 0:
		return "-"
	case x < 10:
		return fmt.Sprintf("%.3f", x)
	case x < 100:
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.1f", x)
}
