package cluster_test

import (
	"flag"
	"fmt"

	"github.com/paramserv/paramserv/internal/cluster"
)

func Example() {
	// TF_CONFIG as the TFJob operator sets it: a chief, two workers and a ps.
	// This process is TensorFlow's worker 1, which is paramserv's worker 2.
	tfConfig := `{"cluster": {"chief": ["chief-0:2222"],
	                          "worker": ["worker-0:2222", "worker-1:2222"],
	                          "ps": ["ps-0:2222"]},
	              "task": {"type": "worker", "index": 1},
	              "environment": "cloud"}`

	// An explicit --ps_hosts replaces cluster.ps; the rest comes from TF_CONFIG.
	fs := flag.NewFlagSet("paramserv", flag.ContinueOnError)
	flags := cluster.BindFlags(fs)
	if err := fs.Parse([]string{"--ps_hosts=ps-a:2222,ps-b:2222"}); err != nil {
		fmt.Println(err)
		return
	}

	cfg, err := cluster.Resolve(flags(), tfConfig) // tfConfig: os.Getenv("TF_CONFIG")
	if err != nil {
		fmt.Println(err) // an *cluster.Error: exit with status 2
		return
	}
	fmt.Println("ps:     ", cfg.Spec.PS)
	fmt.Println("workers:", cfg.Spec.Workers)
	fmt.Println("task:   ", cfg.Task, "at", cfg.Addr(), "chief:", cfg.IsChief())
	for _, w := range cfg.Warnings {
		fmt.Println("warning:", w)
	}

	_, err = cluster.Resolve(cluster.Flags{PSHosts: "ps-0:2222,localhost", PSHostsSet: true}, "")
	fmt.Println(err)
	// Output:
	// ps:      [ps-a:2222 ps-b:2222]
	// workers: [chief-0:2222 worker-0:2222 worker-1:2222]
	// task:    /job:worker/task:2 at worker-1:2222 chief: false
	// warning: --ps_hosts overrides TF_CONFIG cluster.ps
	// --ps_hosts: entry 2 "localhost" is not host:port (missing port in address; want e.g. 127.0.0.1:2222)
}
