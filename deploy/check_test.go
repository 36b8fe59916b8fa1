package deploy

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Governor's defaults (cmd/governor/config.go) for the settings the checks
// read, used when a manifest leaves them unset.
const (
	defaultListen       = "127.0.0.1:8080"
	defaultAdminListen  = ":9090"
	defaultDrainTimeout = 30 * time.Second
	// Kubernetes' default terminationGracePeriodSeconds.
	defaultGracePeriod = 30 * time.Second
	// terminationMargin is what the grace period must keep beyond the
	// preStop hook and Governor's drain, for signal delivery and exit.
	terminationMargin = 10 * time.Second
)

// governorName is the name of Governor's container in every example.
const governorName = "governor"

// manifests is one rendered kustomization, decoded into API types.
type manifests struct {
	configMaps      map[string]*corev1.ConfigMap
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	budgets         []*policyv1.PodDisruptionBudget
	networkPolicies []*networkingv1.NetworkPolicy
}

// load renders and decodes the kustomization in dir.
func load(t *testing.T, dir string) *manifests {
	t.Helper()
	objs, err := decodeAll(render(t, dir))
	require.NoError(t, err, "strict decoding of the rendered %s", dir)
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *policyv1.PodDisruptionBudget:
			m.budgets = append(m.budgets, o)
		case *networkingv1.NetworkPolicy:
			m.networkPolicies = append(m.networkPolicies, o)
		default:
			t.Fatalf("%s renders a %T, which these checks do not cover: add checks for it", dir, obj)
		}
	}
	return m
}

// mode is how a Deployment runs Governor.
type mode string

const (
	noGovernor mode = ""
	sidecar    mode = "sidecar" // an init container with restartPolicy: Always
	shared     mode = "shared"  // a container of its own Deployment, behind a Service
)

// governor finds Governor's container in a pod and tells how it runs.
func governor(spec *corev1.PodSpec) (*corev1.Container, mode) {
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == governorName {
			return &spec.InitContainers[i], sidecar
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == governorName {
			return &spec.Containers[i], shared
		}
	}
	return nil, noGovernor
}

// modes lists how the Deployments of m run Governor.
func (m *manifests) modes() []mode {
	var modes []mode
	for _, d := range m.deployments {
		if _, md := governor(&d.Spec.Template.Spec); md != noGovernor {
			modes = append(modes, md)
		}
	}
	return modes
}

// envValue is one environment variable of a container as the kubelet would
// set it, as far as the manifests tell.
type envValue struct {
	value  string                    // a literal, or from a ConfigMap
	secret *corev1.SecretKeySelector // from a Secret: value unknown
	other  bool                      // from the downward API: value unknown
}

// knownVariables are the GOVERNOR_* variables cmd/governor reads, taken from
// its config struct's env tags.
var knownVariables = func() map[string]bool {
	src, err := os.ReadFile("../cmd/governor/config.go")
	if err != nil {
		panic(fmt.Sprintf("reading Governor's variables: %v", err))
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`env:"(GOVERNOR_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		known[m[1]] = true
	}
	if len(known) < 10 {
		panic(fmt.Sprintf("found only %d GOVERNOR_* variables in cmd/governor/config.go", len(known)))
	}
	return known
}()

// problems lists what is wrong with m; none is what the examples promise.
func (m *manifests) problems() []string {
	var p problemList
	for _, d := range m.deployments {
		m.checkDeployment(&p, d)
	}
	for _, s := range m.services {
		if len(s.Spec.Selector) == 0 || len(m.podsOf(labels.SelectorFromSet(s.Spec.Selector))) == 0 {
			p.add("Service %s selects no pod of this kustomization", s.Name)
		}
	}
	for _, b := range m.budgets {
		m.checkBudget(&p, b)
	}
	for _, np := range m.networkPolicies {
		m.checkNetworkPolicy(&p, np)
	}
	return p
}

type problemList []string

func (p *problemList) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// podsOf returns the Deployments whose pods sel selects.
func (m *manifests) podsOf(sel labels.Selector) []*appsv1.Deployment {
	var ds []*appsv1.Deployment
	for _, d := range m.deployments {
		if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			ds = append(ds, d)
		}
	}
	return ds
}

func (m *manifests) checkDeployment(p *problemList, d *appsv1.Deployment) {
	spec := &d.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		p.add("Deployment %s: its selector does not select its own pods", d.Name)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("Deployment %s: automountServiceAccountToken must be false: no container talks to the API", d.Name)
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		checkSecurity(p, d.Name, spec.SecurityContext, c)
		checkResources(p, d.Name, c)
		m.env(p, d.Name, c) // reports references to missing ConfigMaps
	}

	gov, md := governor(spec)
	if md == noGovernor {
		return
	}
	env := m.env(&problemList{}, d.Name, *gov) // reported above
	for name := range env {
		if strings.HasPrefix(name, "GOVERNOR_") && !knownVariables[name] {
			p.add("Deployment %s: Governor reads no variable %s", d.Name, name)
		}
	}
	checkMemoryLimit(p, d.Name, *gov, env)
	listen := setting(env, "GOVERNOR_LISTEN", defaultListen)
	adminListen := setting(env, "GOVERNOR_ADMIN_LISTEN", defaultAdminListen)
	listenPort, listenLoopback, err := parseListen(listen)
	if err != nil {
		p.add("Deployment %s: GOVERNOR_LISTEN: %v", d.Name, err)
	}
	adminPort, _, err := parseListen(adminListen)
	if err != nil {
		p.add("Deployment %s: GOVERNOR_ADMIN_LISTEN: %v", d.Name, err)
	}

	// Probes and metrics on the admin listener.
	if named, ok := containerPort(*gov, intstr.FromString("admin")); !ok || named != adminPort {
		p.add("Deployment %s: Governor's port named admin is %d, GOVERNOR_ADMIN_LISTEN is %q", d.Name, named, adminListen)
	}
	for _, probe := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{
		{"startupProbe", "/readyz", gov.StartupProbe},
		{"readinessProbe", "/readyz", gov.ReadinessProbe},
		{"livenessProbe", "/healthz", gov.LivenessProbe},
	} {
		switch {
		case probe.probe == nil || probe.probe.HTTPGet == nil:
			p.add("Deployment %s: Governor needs an HTTP %s on %s", d.Name, probe.kind, probe.path)
		case probe.probe.HTTPGet.Path != probe.path:
			p.add("Deployment %s: Governor's %s gets %s, want %s", d.Name, probe.kind, probe.probe.HTTPGet.Path, probe.path)
		default:
			if port, ok := containerPort(*gov, probe.probe.HTTPGet.Port); !ok || port != adminPort {
				p.add("Deployment %s: Governor's %s is on port %s, not the admin listener (%s)", d.Name, probe.kind, probe.probe.HTTPGet.Port.String(), adminListen)
			}
			if s := probe.probe.HTTPGet.Scheme; s != "" && s != corev1.URISchemeHTTP {
				p.add("Deployment %s: Governor's %s uses %s; the admin listener speaks HTTP", d.Name, probe.kind, s)
			}
		}
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != fmt.Sprint(adminPort) || ann["prometheus.io/path"] != "/metrics" {
		p.add("Deployment %s: the pod's prometheus.io annotations must scrape /metrics on %d: %v", d.Name, adminPort, ann)
	}

	// The grace period covers the preStop hook and the whole drain.
	drain := defaultDrainTimeout
	if v, ok := env["GOVERNOR_DRAIN_TIMEOUT"]; ok {
		if drain, err = time.ParseDuration(v.value); err != nil {
			p.add("Deployment %s: GOVERNOR_DRAIN_TIMEOUT: %v", d.Name, err)
		}
	}
	var preStop time.Duration
	if gov.Lifecycle != nil && gov.Lifecycle.PreStop != nil {
		if gov.Lifecycle.PreStop.Sleep == nil {
			p.add("Deployment %s: Governor's preStop can only be a sleep: the distroless image has no shell", d.Name)
		} else {
			preStop = time.Duration(gov.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	grace := defaultGracePeriod
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < preStop+drain+terminationMargin {
		p.add("Deployment %s: terminationGracePeriodSeconds (%v) must cover the preStop sleep (%v), GOVERNOR_DRAIN_TIMEOUT (%v) and %v of margin",
			d.Name, grace, preStop, drain, terminationMargin)
	}

	// A listener other pods can reach needs the API token, from a Secret.
	if !listenLoopback {
		tok, ok := env["GOVERNOR_API_TOKEN"]
		switch {
		case !ok || tok.secret == nil:
			p.add("Deployment %s: GOVERNOR_LISTEN %q is not loopback: set GOVERNOR_API_TOKEN from a secretKeyRef", d.Name, listen)
		case tok.secret.Optional != nil && *tok.secret.Optional:
			p.add("Deployment %s: GOVERNOR_API_TOKEN's Secret must not be optional", d.Name)
		}
	}

	if dir, ok := env["GOVERNOR_BATCH_DIR"]; ok && dir.value != "" {
		checkBatchDir(p, d, gov, dir.value)
	}

	switch md {
	case sidecar:
		m.checkSidecar(p, d, gov, env, listen, listenLoopback)
	case shared:
		m.checkShared(p, d, gov, listen, listenPort, listenLoopback)
	}
}

// checkBatchDir checks that Governor's batch directory is on a writable
// volume of the pod: the root filesystem is read-only, and a directory in
// the container's own layer would not outlive a container restart anyway.
func checkBatchDir(p *problemList, d *appsv1.Deployment, gov *corev1.Container, dir string) {
	for _, vm := range gov.VolumeMounts {
		if dir != vm.MountPath && !strings.HasPrefix(dir, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		if vm.ReadOnly {
			p.add("Deployment %s: GOVERNOR_BATCH_DIR %s is on a read-only mount", d.Name, dir)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name {
				checkBatchVolume(p, d, dir, &v)
				return
			}
		}
		p.add("Deployment %s: GOVERNOR_BATCH_DIR %s is on volume %q, which the pod does not define", d.Name, dir, vm.Name)
		return
	}
	p.add("Deployment %s: GOVERNOR_BATCH_DIR %s is not on a volume mounted in Governor's container", d.Name, dir)
}

// checkBatchVolume checks the volume that holds the batch directory. Its
// size must be a filesystem's, which Governor rides out when full (the job
// pauses, "stalled"): an emptyDir on disk with a sizeLimit is not, since
// the kubelet evicts a pod whose emptyDir exceeds it, killing the
// application too and deleting the emptyDir with its jobs. A volume
// claimed from a StorageClass is owned by root unless the pod sets an
// fsGroup, and Governor runs as another user.
func checkBatchVolume(p *problemList, d *appsv1.Deployment, dir string, v *corev1.Volume) {
	if e := v.EmptyDir; e != nil && e.SizeLimit != nil && e.Medium != corev1.StorageMediumMemory {
		p.add("Deployment %s: GOVERNOR_BATCH_DIR %s is on an emptyDir with a sizeLimit: past it the kubelet evicts the pod, and the emptyDir goes with its jobs; use a volume of its own size (an ephemeral volume or a PersistentVolumeClaim), which Governor rides out when full", d.Name, dir)
	}
	if v.Ephemeral != nil || v.PersistentVolumeClaim != nil {
		sc := d.Spec.Template.Spec.SecurityContext
		if sc == nil || sc.FSGroup == nil {
			p.add("Deployment %s: GOVERNOR_BATCH_DIR %s is on a claimed volume, owned by root: set the pod's securityContext.fsGroup so that Governor can write it", d.Name, dir)
		}
	}
}

func (m *manifests) checkSidecar(p *problemList, d *appsv1.Deployment, gov *corev1.Container, env map[string]envValue, listen string, loopback bool) {
	if gov.RestartPolicy == nil || *gov.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		p.add("Deployment %s: the governor init container needs restartPolicy: Always to be a native sidecar", d.Name)
	}
	if !loopback {
		p.add("Deployment %s: a sidecar's GOVERNOR_LISTEN %q should be loopback, which only the pod reaches", d.Name, listen)
	}
	routes := map[string]bool{}
	for _, r := range strings.Split(setting(env, "GOVERNOR_ROUTES", ""), ",") {
		if name, _, ok := strings.Cut(r, "="); ok {
			routes[strings.TrimSpace(name)] = true
		}
	}
	base := "http://" + listen
	if len(d.Spec.Template.Spec.Containers) == 0 {
		p.add("Deployment %s: no application container next to Governor", d.Name)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		appEnv := m.env(&problemList{}, d.Name, c)
		if got := appEnv["OPENAI_BASE_URL"].value; got != base+"/v1" {
			p.add("Deployment %s: container %s: OPENAI_BASE_URL is %q, want %q", d.Name, c.Name, got, base+"/v1")
		}
		got := appEnv["ANTHROPIC_BASE_URL"].value
		route, ok := strings.CutPrefix(got, base+"/")
		if !ok || !routes[route] {
			p.add("Deployment %s: container %s: ANTHROPIC_BASE_URL %q is not %s/<a route of GOVERNOR_ROUTES %v>", d.Name, c.Name, got, base, routes)
		}
	}
}

func (m *manifests) checkShared(p *problemList, d *appsv1.Deployment, gov *corev1.Container, listen string, listenPort int32, loopback bool) {
	if loopback {
		p.add("Deployment %s: GOVERNOR_LISTEN %q is loopback: a Service cannot reach it", d.Name, listen)
	}
	served := false
	for _, s := range m.services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			port, ok := containerPort(*gov, target)
			if !ok {
				p.add("Service %s: port %s: target %s is no port of Governor's container", s.Name, sp.Name, target.String())
			}
			served = served || port == listenPort
		}
	}
	if !served {
		p.add("Deployment %s: no Service sends traffic to Governor's main listener (%s)", d.Name, listen)
	}
}

func (m *manifests) checkBudget(p *problemList, b *policyv1.PodDisruptionBudget) {
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	if err != nil {
		p.add("PodDisruptionBudget %s: %v", b.Name, err)
		return
	}
	ds := m.podsOf(sel)
	if len(ds) == 0 {
		p.add("PodDisruptionBudget %s selects no pod of this kustomization", b.Name)
	}
	for _, d := range ds {
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		// A budget that allows no disruption blocks node drains forever.
		if mn := b.Spec.MinAvailable; mn != nil && mn.Type == intstr.Int && mn.IntVal >= replicas {
			p.add("PodDisruptionBudget %s: minAvailable %d with %d replicas of %s blocks every node drain", b.Name, mn.IntVal, replicas, d.Name)
		}
		if mx := b.Spec.MaxUnavailable; mx != nil && mx.Type == intstr.Int && mx.IntVal < 1 {
			p.add("PodDisruptionBudget %s: maxUnavailable %d blocks every node drain", b.Name, mx.IntVal)
		}
	}
}

func (m *manifests) checkNetworkPolicy(p *problemList, np *networkingv1.NetworkPolicy) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		p.add("NetworkPolicy %s: %v", np.Name, err)
		return
	}
	ds := m.podsOf(sel)
	if len(ds) == 0 {
		p.add("NetworkPolicy %s selects no pod of this kustomization", np.Name)
	}
	for _, rule := range np.Spec.Ingress {
		for _, port := range rule.Ports {
			if port.Port == nil || port.Port.Type != intstr.String {
				continue
			}
			for _, d := range ds {
				found := false
				for _, c := range d.Spec.Template.Spec.Containers {
					_, ok := containerPort(c, *port.Port)
					found = found || ok
				}
				for _, c := range d.Spec.Template.Spec.InitContainers {
					_, ok := containerPort(c, *port.Port)
					found = found || ok
				}
				if !found {
					p.add("NetworkPolicy %s: no container of %s has a port named %s", np.Name, d.Name, port.Port.StrVal)
				}
			}
		}
	}
}

// checkSecurity wants the restrictive security context: non-root, no
// privilege escalation, a read-only root filesystem, every capability
// dropped, and the runtime's default seccomp profile.
func checkSecurity(p *problemList, deployment string, pod *corev1.PodSecurityContext, c corev1.Container) {
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	at := fmt.Sprintf("Deployment %s: container %s:", deployment, c.Name)
	nonRoot, user, seccomp := pod.RunAsNonRoot, pod.RunAsUser, pod.SeccompProfile
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	if sc.RunAsUser != nil {
		user = sc.RunAsUser
	}
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	if nonRoot == nil || !*nonRoot {
		p.add("%s runAsNonRoot must be true", at)
	}
	if user == nil || *user == 0 {
		p.add("%s runAsUser must be a numeric non-root user (65532, distroless nonroot)", at)
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		p.add("%s the seccomp profile must be RuntimeDefault", at)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.add("%s allowPrivilegeEscalation must be false", at)
	}
	if sc.Privileged != nil && *sc.Privileged {
		p.add("%s must not be privileged", at)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.add("%s readOnlyRootFilesystem must be true", at)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		p.add("%s capabilities must drop ALL and add none", at)
	}
}

// checkResources wants CPU and memory requests and limits, requests within
// limits.
func checkResources(p *problemList, deployment string, c corev1.Container) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[name]
		lim, hasLim := c.Resources.Limits[name]
		switch {
		case !hasReq || !hasLim:
			p.add("Deployment %s: container %s: set both a request and a limit for %s", deployment, c.Name, name)
		case req.Cmp(lim) > 0:
			p.add("Deployment %s: container %s: %s request %s exceeds its limit %s", deployment, c.Name, name, req.String(), lim.String())
		}
	}
}

// memoryHeadroom is the share of Governor's container memory limit that
// GOMEMLIMIT must leave free: the Go runtime does not count the kernel's
// socket buffers, charged to the container, and may overshoot its limit.
const memoryHeadroom = 0.2

// checkMemoryLimit wants GOMEMLIMIT set to a literal at most 80% of the
// container's memory limit: at the limit itself, the collector works
// hardest only when the container is about to be killed.
func checkMemoryLimit(p *problemList, deployment string, c corev1.Container, env map[string]envValue) {
	lim, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return // reported by checkResources
	}
	v, set := env["GOMEMLIMIT"]
	if !set || v.value == "" {
		p.add("Deployment %s: container %s: set GOMEMLIMIT to a value below its memory limit (%s), leaving %.0f%% of it free",
			deployment, c.Name, lim.String(), memoryHeadroom*100)
		return
	}
	n, err := parseGoMemLimit(v.value)
	if err != nil {
		p.add("Deployment %s: container %s: GOMEMLIMIT: %v", deployment, c.Name, err)
		return
	}
	if most := float64(lim.Value()) * (1 - memoryHeadroom); float64(n) > most {
		p.add("Deployment %s: container %s: GOMEMLIMIT %s leaves less than %.0f%% of the memory limit %s free (at most %.0f MiB)",
			deployment, c.Name, v.value, memoryHeadroom*100, lim.String(), most/(1<<20))
	}
}

// parseGoMemLimit parses GOMEMLIMIT as the Go runtime does: a number of
// bytes with an optional unit B, KiB, MiB, GiB or TiB.
func parseGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a number of bytes with an optional unit B, KiB, MiB, GiB or TiB", s)
	}
	return n * mult, nil
}

// env resolves c's environment as the kubelet would: envFrom in order, then
// env. It reports references to ConfigMaps this kustomization lacks.
func (m *manifests) env(p *problemList, deployment string, c corev1.Container) map[string]envValue {
	env := map[string]envValue{}
	for _, from := range c.EnvFrom {
		if ref := from.ConfigMapRef; ref != nil {
			cm, ok := m.configMaps[ref.Name]
			if !ok {
				if ref.Optional == nil || !*ref.Optional {
					p.add("Deployment %s: container %s: envFrom names ConfigMap %s, which is not rendered", deployment, c.Name, ref.Name)
				}
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = envValue{value: v}
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envValue{value: e.Value}
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = envValue{secret: e.ValueFrom.SecretKeyRef}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := m.configMaps[ref.Name]
			if !ok {
				p.add("Deployment %s: container %s: %s names ConfigMap %s, which is not rendered", deployment, c.Name, e.Name, ref.Name)
				continue
			}
			if v, ok := cm.Data[ref.Key]; ok {
				env[e.Name] = envValue{value: v}
			}
		default:
			env[e.Name] = envValue{other: true}
		}
	}
	return env
}

// setting is a variable's literal value, or def when it is unset.
func setting(env map[string]envValue, name, def string) string {
	if v, ok := env[name]; ok {
		return v.value
	}
	return def
}

// parseListen returns a listen address's port and whether only loopback
// reaches it.
func parseListen(addr string) (port int32, loopback bool, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false, err
	}
	pn, err := net.LookupPort("tcp", portStr)
	if err != nil {
		return 0, false, err
	}
	ip := net.ParseIP(host)
	return int32(pn), host == "localhost" || ip != nil && ip.IsLoopback(), nil
}

// containerPort resolves a port, by name or number, among c's ports.
func containerPort(c corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if port.Type == intstr.String && cp.Name == port.StrVal || port.Type == intstr.Int && cp.ContainerPort == port.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}
