// Command pulumi-language-python is the Python language host of this project's engine build: it serves the
// LanguageRuntime protocol of the CLI it is built with (pulumi/pulumi sdk/v3 v3.274.1) and hands each request to
// Pulumi's own v3.79.0 host (engine/python, installed in the python-host folder beside this binary), started with
// the runtime options of the project the request names.
//
// Why: the v3.79.0 host reads `runtime.options` once, from command-line flags (pulumi/pulumi v3.79.0
// sdk/python/cmd/pulumi-language-python/main.go `main`: `-virtualenv`, `-root`), which the CLI of that time
// passed. The v3.274.1 CLI starts a language host with only the engine's address (pkg/resource/plugin/
// langruntime_plugin.go `NewLanguageRuntime`, `buildArgsForNewPlugin`) and sends the options with every request
// instead (`ProgramInfo.Options`, marshalled by pkg/resource/plugin/langruntime.go `ProgramInfo.Marshal`). So the
// old host, started bare, ran the `python` on PATH and `virtualenv:` was ignored. One CLI command also asks one
// host about several projects: the program (Pulumi.yaml) and each `--policy-pack` (PulumiPolicy.yaml), each with a
// virtualenv of its own. Hence one v3.79.0 host per (project root, virtualenv), started the way the old CLI started
// it, and the option resolved as Pulumi resolves it: relative to the project's root directory (the current host's
// `parseOptions` and sdk/v3 python/toolchain `newPip`).
//
// Policy packs: the v3.274.1 CLI starts a pack directory through the language host's RunPlugin with kind
// "analyzer" (pkg/resource/plugin/analyzer_plugin.go `NewPolicyAnalyzer`, plugin.go `newPlugin`), which the
// v3.79.0 host predates. runPolicyPack does what Pulumi's current host does (sdk/python/cmd/pulumi-language-python
// main.go `RunPlugin`): `python -u -m pulumi.policy ENGINE DIR` in the pack's virtualenv, in the pack's directory,
// behind sdk/v3's PolicyProxy, which takes the engine's stack configuration and passes it on as the
// PULUMI_* variables pulumi_policy reads.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// hostVersion is the v3.79.0 host's version (build.sh sets it), reported as this host's.
var hostVersion = "unknown"

// legacyHost is the v3.79.0 host and its exec script, in this folder beside this binary (engine/build.sh).
const legacyHostFolder = "python-host"

func main() {
	var tracing string
	flag.StringVar(&tracing, "tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	flag.Parse()
	var engineAddress string
	if flag.NArg() > 0 {
		engineAddress = flag.Arg(0)
	}

	self, err := os.Executable()
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not determine current executable: %w", err))
	}
	legacy := filepath.Join(filepath.Dir(self), legacyHostFolder, "pulumi-language-python")
	if _, err := os.Stat(legacy); err != nil {
		cmdutil.Exit(fmt.Errorf("missing the v3.79.0 Python language host %s (run make setup): %w", legacy, err))
	}
	cwd, err := os.Getwd()
	if err != nil {
		cmdutil.Exit(fmt.Errorf("getting the working directory: %w", err))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancelChannel := make(chan bool)
	go func() {
		<-ctx.Done()
		close(cancelChannel)
	}()
	if err := rpcutil.Healthcheck(ctx, engineAddress, 5*time.Minute, cancel); err != nil {
		cmdutil.Exit(fmt.Errorf("could not start health check host RPC server: %w", err))
	}

	router := &router{legacy: legacy, cwd: cwd, engineAddress: engineAddress, tracing: tracing,
		hosts: map[hostKey]*startedHost{}}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancelChannel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, router)
			return nil
		},
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start language host RPC server: %w", err))
	}
	fmt.Printf("%d\n", handle.Port)
	err = <-handle.Done
	router.close()
	if err != nil {
		cmdutil.Exit(fmt.Errorf("language host RPC stopped serving: %w", err))
	}
}

// hostKey is what the v3.79.0 host takes at start: the project's root directory and its virtualenv option.
type hostKey struct {
	root       string
	virtualenv string
}

type startedHost struct {
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	client pulumirpc.LanguageRuntimeClient
}

type router struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	legacy        string
	cwd           string
	engineAddress string
	tracing       string

	mu    sync.Mutex
	hosts map[hostKey]*startedHost
}

// pythonOptions are the runtime options of Pulumi.yaml / PulumiPolicy.yaml this build honours.
type pythonOptions struct {
	root       string
	programDir string
	virtualenv string
}

// parseOptions reads a request's runtime options as Pulumi's current host does (its `parseOptions`), refusing,
// with the option named, what the v3.79.0 host cannot do: a toolchain other than pip, a typechecker.
func parseOptions(info *pulumirpc.ProgramInfo) (pythonOptions, error) {
	options := pythonOptions{root: info.GetRootDirectory(), programDir: info.GetProgramDirectory()}
	if info.GetOptions() == nil {
		return options, nil
	}
	for name, value := range info.GetOptions().AsMap() {
		switch name {
		case "virtualenv":
			text, ok := value.(string)
			if !ok {
				return options, errors.New("virtualenv option must be a string")
			}
			options.virtualenv = text
		case "toolchain":
			if value != "pip" {
				return options, fmt.Errorf("unsupported toolchain option %v: this engine build's Python language "+
					"host (v%s) runs the pip toolchain only; set `toolchain: pip`, or use Pulumi's own install", value,
					strings.TrimPrefix(hostVersion, "v"))
			}
		case "typechecker":
			return options, fmt.Errorf("unsupported typechecker option %v: this engine build's Python language "+
				"host (v%s) has no typechecker; remove the option, or use Pulumi's own install", value,
				strings.TrimPrefix(hostVersion, "v"))
		}
	}
	return options, nil
}

// hostFor is the v3.79.0 host started for the project the request names (one per root and virtualenv).
func (r *router) hostFor(info *pulumirpc.ProgramInfo) (pulumirpc.LanguageRuntimeClient, error) {
	options, err := parseOptions(info)
	if err != nil {
		return nil, err
	}
	key := hostKey{root: options.root, virtualenv: options.virtualenv}
	r.mu.Lock()
	defer r.mu.Unlock()
	if host, ok := r.hosts[key]; ok {
		return host.client, nil
	}
	host, err := r.start(key)
	if err != nil {
		return nil, err
	}
	r.hosts[key] = host
	return host.client, nil
}

// start runs the v3.79.0 host as the CLI of its time did: flags for the options, the engine's address last, in
// the CLI's working directory; it prints its port first, then the programs' output, which goes on to the CLI.
func (r *router) start(key hostKey) (*startedHost, error) {
	var args []string
	if r.tracing != "" {
		args = append(args, "-tracing="+r.tracing)
	}
	if key.root != "" {
		args = append(args, "-root="+key.root)
	}
	if key.virtualenv != "" {
		args = append(args, "-virtualenv="+key.virtualenv)
	}
	args = append(args, r.engineAddress)
	cmd := exec.Command(r.legacy, args...)
	cmd.Dir = r.cwd
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the Python language host %s: %w", r.legacy, err)
	}
	reader := bufio.NewReader(stdout)
	line, err := reader.ReadString('\n')
	port, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the Python language host %s did not print its port (it printed %q)", r.legacy, line)
	}
	go func() { _, _ = io.Copy(os.Stdout, reader) }()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port),
		grpc.WithTransportCredentials(insecure.NewCredentials()), rpcutil.GrpcChannelOptions())
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("connecting to the Python language host: %w", err)
	}
	return &startedHost{cmd: cmd, conn: conn, client: pulumirpc.NewLanguageRuntimeClient(conn)}, nil
}

func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, host := range r.hosts {
		_ = host.conn.Close()
		_ = host.cmd.Process.Signal(syscall.SIGTERM)
		_ = host.cmd.Wait()
	}
}

// GetRequiredPackages is left to GetRequiredPlugins, which the CLI asks when a host does not implement it
// (pkg/resource/plugin/langruntime_plugin.go `GetRequiredPackages`); the v3.79.0 host predates it.
func (r *router) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method GetRequiredPackages not implemented")
}

func (r *router) GetRequiredPlugins(ctx context.Context, req *pulumirpc.GetRequiredPluginsRequest) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return forward(r, ctx, req.GetInfo(), req, pulumirpc.LanguageRuntimeClient.GetRequiredPlugins)
}

func (r *router) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	return forward(r, ctx, req.GetInfo(), req, pulumirpc.LanguageRuntimeClient.Run)
}

func (r *router) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: hostVersion}, nil
}

// InstallDependencies (`pulumi install`, in a project or a policy pack) creates the virtualenv and installs
// requirements.txt into it: the v3.79.0 host's InstallDependencies, started with that project's virtualenv.
func (r *router) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest, server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	client, err := r.hostFor(req.GetInfo())
	if err != nil {
		return err
	}
	stream, err := client.InstallDependencies(server.Context(), req)
	if err != nil {
		return err
	}
	for {
		message, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := server.Send(message); err != nil {
			return err
		}
	}
}

func (r *router) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	return forward(r, ctx, req.GetInfo(), req, pulumirpc.LanguageRuntimeClient.About)
}

func (r *router) GetProgramDependencies(ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return forward(r, ctx, req.GetInfo(), req, pulumirpc.LanguageRuntimeClient.GetProgramDependencies)
}

// RunPlugin starts a plugin directory: a policy pack (kind analyzer) as Pulumi's current host does; any other
// plugin through the v3.79.0 host, which runs `python PROGRAM ARGS` and takes the directory as the program.
func (r *router) RunPlugin(req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer) error {
	if req.GetKind() == string(apitype.AnalyzerPlugin) {
		return r.runPolicyPack(req, server)
	}
	client, err := r.hostFor(req.GetInfo())
	if err != nil {
		return err
	}
	if req.GetProgram() == "" { //nolint:staticcheck // the field the v3.79.0 host reads
		req.Program = req.GetInfo().GetProgramDirectory() //nolint:staticcheck
	}
	stream, err := client.RunPlugin(server.Context(), req)
	if err != nil {
		return err
	}
	for {
		message, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := server.Send(message); err != nil {
			return err
		}
	}
}

// runPolicyPack runs `python -u -m pulumi.policy ARGS DIR` in the pack's virtualenv (sdk/v3 python/toolchain, as
// the current host resolves it), in the pack's directory, behind sdk/v3's PolicyProxy: the proxy answers the
// engine's Handshake and ConfigureStack, the pack gets the stack's configuration as PULUMI_ORGANIZATION,
// PULUMI_PROJECT, PULUMI_STACK, PULUMI_DRY_RUN and PULUMI_CONFIG, and the proxy then forwards to the pack.
func (r *router) runPolicyPack(req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer) error {
	ctx := server.Context()
	options, err := parseOptions(req.GetInfo())
	if err != nil {
		return err
	}
	tc, err := toolchain.ResolveToolchain(toolchain.PythonOptions{
		Root: options.root, ProgramDir: options.programDir, Virtualenv: options.virtualenv, Toolchain: toolchain.Pip,
	})
	if err != nil {
		return err
	}
	// A local pack's virtualenv is made by `pulumi install` in its directory (pkg/cmd/pulumi/install/install.go);
	// `pulumi preview --policy-pack` does not make it, and says so here.
	if err := tc.ValidateVenv(ctx); err != nil {
		return err
	}
	args := append([]string{"-u", "-m", "pulumi.policy"}, req.GetArgs()...)
	args = append(args, options.programDir)
	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	cmd.Dir = options.programDir

	proxy, stdout, err := sdk.NewPolicyProxy(ctx, stdout)
	if err != nil {
		return fmt.Errorf("could not start policy pack proxy: %w", err)
	}
	config, err := proxy.AwaitConfiguration(ctx)
	if err != nil {
		return fmt.Errorf("could not get stack configuration: %w", err)
	}
	if config != nil {
		setIfGiven := func(name, value string) {
			if value != "" {
				cmd.Env = append(cmd.Env, name+"="+value)
			}
		}
		setIfGiven("PULUMI_ORGANIZATION", config.GetOrganization())
		setIfGiven("PULUMI_PROJECT", config.GetProject())
		setIfGiven("PULUMI_STACK", config.GetStack())
		setIfGiven("PULUMI_DRY_RUN", strconv.FormatBool(config.GetDryRun()))
		if config.GetConfig() != nil {
			configJSON, err := json.Marshal(config.GetConfig())
			if err != nil {
				return fmt.Errorf("could not marshal stack configuration: %w", err)
			}
			setIfGiven("PULUMI_CONFIG", string(configJSON))
		}
	}
	cmd.Env = append(cmd.Env, req.GetEnv()...)
	cmd.Stdout, cmd.Stderr = stdout, stderr

	if err := cmd.Start(); err != nil {
		proxy.Abort(err)
		return fmt.Errorf("could not start the policy pack: %w", err)
	}
	if err := proxy.Attach(ctx, cmd); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if waitStatus, ok := exitErr.Sys().(syscall.WaitStatus); ok {
				return server.Send(&pulumirpc.RunPluginResponse{
					Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(waitStatus.ExitStatus())}, //nolint:gosec
				})
			}
		}
		return fmt.Errorf("policy pack: %w", err)
	}
	return closer.Close()
}

// The generators take no project: any started host (one without a virtualenv if none is).
func (r *router) anyProgram() *pulumirpc.ProgramInfo {
	return &pulumirpc.ProgramInfo{RootDirectory: r.cwd, ProgramDirectory: r.cwd}
}

// forward sends one unary call to the host started for the program (hostFor), and returns its answer.
func forward[Req, Resp any](
	r *router, ctx context.Context, info *pulumirpc.ProgramInfo, req Req,
	call func(pulumirpc.LanguageRuntimeClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
) (Resp, error) {
	client, err := r.hostFor(info)
	if err != nil {
		var none Resp
		return none, err
	}
	return call(client, ctx, req)
}

func (r *router) GenerateProgram(ctx context.Context, req *pulumirpc.GenerateProgramRequest) (*pulumirpc.GenerateProgramResponse, error) {
	return forward(r, ctx, r.anyProgram(), req, pulumirpc.LanguageRuntimeClient.GenerateProgram)
}

func (r *router) GenerateProject(ctx context.Context, req *pulumirpc.GenerateProjectRequest) (*pulumirpc.GenerateProjectResponse, error) {
	return forward(r, ctx, r.anyProgram(), req, pulumirpc.LanguageRuntimeClient.GenerateProject)
}

func (r *router) GeneratePackage(ctx context.Context, req *pulumirpc.GeneratePackageRequest) (*pulumirpc.GeneratePackageResponse, error) {
	return forward(r, ctx, r.anyProgram(), req, pulumirpc.LanguageRuntimeClient.GeneratePackage)
}

func (r *router) Pack(ctx context.Context, req *pulumirpc.PackRequest) (*pulumirpc.PackResponse, error) {
	return forward(r, ctx, r.anyProgram(), req, pulumirpc.LanguageRuntimeClient.Pack)
}
