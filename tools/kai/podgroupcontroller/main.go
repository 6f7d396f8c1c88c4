// Command podgroupcontroller runs KAI-Scheduler's pod-group controller (the pinned module's
// cmd/podgroupcontroller/app) so that its --metrics-bind-address takes effect. The pinned version
// parses that flag but never passes it on, which leaves the metrics server on controller-runtime's
// default, :8080 on every interface, where it collides with any other server on the machine and
// the controller fails to start.
package main

import (
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/NVIDIA/KAI-scheduler/cmd/podgroupcontroller/app"
)

func main() {
	options := app.InitOptions(nil)
	logging := zap.Options{
		Development: true,
		TimeEncoder: zapcore.ISO8601TimeEncoder,
		Level:       zapcore.Level(-1 * options.LogLevel),
	}
	logging.BindFlags(flag.CommandLine)
	flag.Parse()
	metricsserver.DefaultBindAddress = options.MetricsAddr
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logging)))

	if err := app.Run(options, ctrl.GetConfigOrDie(), ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintf(os.Stderr, "pod-group controller: %v\n", err)
		os.Exit(1)
	}
}
