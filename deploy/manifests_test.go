package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// wantModes is how each example runs Governor. A kustomization not listed
// here is still checked, and must run Governor somehow.
var wantModes = map[string][]mode{
	"base":                {sidecar},
	"shared":              {shared},
	"overlays/long-drain": {sidecar},
	"overlays/redis":      {sidecar},
}

func TestManifests(t *testing.T) {
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			m := load(t, dir)
			modes := m.modes()
			if want, ok := wantModes[dir]; ok {
				assert.Equal(t, want, modes, "how %s runs Governor", dir)
			} else {
				assert.NotEmpty(t, modes, "%s runs no Governor", dir)
			}
			assert.Empty(t, m.problems(), "%s", dir)
		})
	}
}

// The overlay changes what it says it changes, and the drain budget follows.
func TestLongDrainOverlay(t *testing.T) {
	m := load(t, "overlays/long-drain")
	require.Len(t, m.deployments, 1)
	spec := m.deployments[0].Spec.Template.Spec
	gov, _ := governor(&spec)
	require.NotNil(t, gov)
	assert.Equal(t, "ghcr.io/llmgovernor/governor:v0.1.0", gov.Image)
	assert.Equal(t, "5m", m.env(&problemList{}, "llm-app", *gov)["GOVERNOR_DRAIN_TIMEOUT"].value)
	assert.Equal(t, int64(610), *spec.TerminationGracePeriodSeconds)
	require.Len(t, m.configMaps, 1, "the overlay merges into the base's ConfigMap rather than adding one")
}

// The Redis overlay gives every replica's Governor the Redis URL from a
// Secret (it may hold a password), optional so that pods start without it.
func TestRedisOverlay(t *testing.T) {
	m := load(t, "overlays/redis")
	require.Len(t, m.deployments, 1)
	d := m.deployments[0]
	assert.Greater(t, *d.Spec.Replicas, int32(1), "coordination is for many replicas")
	spec := d.Spec.Template.Spec
	gov, _ := governor(&spec)
	require.NotNil(t, gov)
	url := m.env(&problemList{}, d.Name, *gov)["GOVERNOR_REDIS_URL"]
	require.NotNil(t, url.secret, "GOVERNOR_REDIS_URL comes from a Secret, not the ConfigMap")
	assert.Equal(t, "governor-redis", url.secret.Name)
	assert.Equal(t, "url", url.secret.Key)
	assert.True(t, url.secret.Optional != nil && *url.secret.Optional, "a missing Secret must not keep the pods from starting")
	_, inConfig := m.env(&problemList{}, d.Name, corev1.Container{EnvFrom: gov.EnvFrom})["GOVERNOR_REDIS_URL"]
	assert.False(t, inConfig, "the URL must not also be set in the ConfigMap")
	assert.Contains(t, m.env(&problemList{}, d.Name, *gov), "GOMEMLIMIT", "the patch adds to the base's env, not replaces it")
}

// Both examples keep async batch jobs on a volume of the pod's, which
// outlives a restart of Governor's container, and which every cluster
// provides: an emptyDir on the node's disk, so the pod starts where no
// StorageClass is the default (a claimed volume would leave it Pending),
// and without a sizeLimit, past which the kubelet would evict the pod.
func TestBatchDirectoryOnAVolumeEveryClusterHas(t *testing.T) {
	for _, dir := range []string{"base", "shared"} {
		m := load(t, dir)
		require.Len(t, m.deployments, 1)
		d := m.deployments[0]
		spec := d.Spec.Template.Spec
		gov, _ := governor(&spec)
		require.NotNil(t, gov)
		path := m.env(&problemList{}, d.Name, *gov)["GOVERNOR_BATCH_DIR"].value
		require.NotEmpty(t, path, "%s sets GOVERNOR_BATCH_DIR", dir)
		require.Len(t, gov.VolumeMounts, 1, dir)
		assert.Equal(t, path, gov.VolumeMounts[0].MountPath, dir)
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == gov.VolumeMounts[0].Name })
		require.GreaterOrEqual(t, i, 0, dir)
		v := spec.Volumes[i]
		assert.Nil(t, v.Ephemeral, "%s: no claim, which needs a StorageClass", dir)
		assert.Nil(t, v.PersistentVolumeClaim, "%s: no claim, which needs a StorageClass", dir)
		require.NotNil(t, v.EmptyDir, "%s: an emptyDir, made and deleted with the pod", dir)
		assert.Nil(t, v.EmptyDir.SizeLimit, "%s: no sizeLimit, past which the pod is evicted", dir)
		assert.Equal(t, corev1.StorageMediumDefault, v.EmptyDir.Medium, "%s: on disk, not in the pod's memory", dir)
		require.NotNil(t, spec.SecurityContext.FSGroup, "%s: Governor, not root, owns a claimed volume put in its place", dir)
		assert.Equal(t, *spec.SecurityContext.RunAsGroup, *spec.SecurityContext.FSGroup, dir)
	}
}

// Each mistake, made in a correct rendering, is reported: the checks that
// TestManifests relies on can fail.
func TestChecksCatchMistakes(t *testing.T) {
	sidecarPod := func(m *manifests) *corev1.PodSpec { return &m.deployments[0].Spec.Template.Spec }
	gov := func(m *manifests) *corev1.Container { c, _ := governor(sidecarPod(m)); return c }
	app := func(m *manifests) *corev1.Container { return &sidecarPod(m).Containers[0] }
	config := func(m *manifests) map[string]string {
		for _, cm := range m.configMaps {
			return cm.Data
		}
		panic("no ConfigMap")
	}
	setEnv := func(c *corev1.Container, name, value string) {
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i] = corev1.EnvVar{Name: name, Value: value}
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
	}

	for name, c := range map[string]struct {
		dir  string
		mess func(*manifests)
		want string
	}{
		"plain init container": {"base", func(m *manifests) { gov(m).RestartPolicy = nil }, "restartPolicy: Always"},
		"grace shorter than drain": {"base", func(m *manifests) {
			sidecarPod(m).TerminationGracePeriodSeconds = ptr.To[int64](35)
		}, "terminationGracePeriodSeconds"},
		"default grace":      {"base", func(m *manifests) { sidecarPod(m).TerminationGracePeriodSeconds = nil }, "terminationGracePeriodSeconds"},
		"drain raised alone": {"base", func(m *manifests) { config(m)["GOVERNOR_DRAIN_TIMEOUT"] = "2m" }, "terminationGracePeriodSeconds"},
		"drain unparsable":   {"base", func(m *manifests) { config(m)["GOVERNOR_DRAIN_TIMEOUT"] = "30" }, "GOVERNOR_DRAIN_TIMEOUT"},
		"preStop sleep not counted": {"shared", func(m *manifests) {
			gov(m).Lifecycle.PreStop.Sleep.Seconds = 20
		}, "terminationGracePeriodSeconds"},
		"preStop exec": {"shared", func(m *manifests) {
			gov(m).Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}
		}, "no shell"},
		"liveness on readyz": {"base", func(m *manifests) { gov(m).LivenessProbe.HTTPGet.Path = "/readyz" }, "livenessProbe gets /readyz"},
		"no startup probe":   {"base", func(m *manifests) { gov(m).StartupProbe = nil }, "startupProbe"},
		"readiness on main port": {"base", func(m *manifests) {
			gov(m).ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8080)
		}, "readinessProbe is on port 8080"},
		"admin port moved":    {"base", func(m *manifests) { config(m)["GOVERNOR_ADMIN_LISTEN"] = ":9191" }, "port named admin"},
		"metrics annotation":  {"base", func(m *manifests) { m.deployments[0].Spec.Template.Annotations["prometheus.io/port"] = "8080" }, "prometheus.io"},
		"misspelt variable":   {"base", func(m *manifests) { config(m)["GOVERNOR_DRAIN_TIMOUT"] = "30s" }, "no variable GOVERNOR_DRAIN_TIMOUT"},
		"app on wrong port":   {"base", func(m *manifests) { setEnv(app(m), "OPENAI_BASE_URL", "http://127.0.0.1:8081/v1") }, "OPENAI_BASE_URL"},
		"app without openai":  {"base", func(m *manifests) { app(m).Env = app(m).Env[1:] }, "OPENAI_BASE_URL"},
		"unrouted anthropic":  {"base", func(m *manifests) { config(m)["GOVERNOR_ROUTES"] = "claude=https://api.anthropic.com" }, "ANTHROPIC_BASE_URL"},
		"sidecar on all addr": {"base", func(m *manifests) { config(m)["GOVERNOR_LISTEN"] = ":8080" }, "should be loopback"},
		"root user": {"base", func(m *manifests) {
			sidecarPod(m).SecurityContext.RunAsUser = ptr.To[int64](0)
			gov(m).SecurityContext.RunAsUser = nil
		}, "runAsUser"},
		"root allowed":         {"base", func(m *manifests) { app(m).SecurityContext.RunAsNonRoot = ptr.To(false) }, "runAsNonRoot"},
		"writable root":        {"base", func(m *manifests) { gov(m).SecurityContext.ReadOnlyRootFilesystem = nil }, "readOnlyRootFilesystem"},
		"batch dir unmounted":  {"base", func(m *manifests) { gov(m).VolumeMounts = nil }, "GOVERNOR_BATCH_DIR"},
		"batch dir read-only":  {"shared", func(m *manifests) { gov(m).VolumeMounts[0].ReadOnly = true }, "read-only mount"},
		"batch dir elsewhere":  {"base", func(m *manifests) { config(m)["GOVERNOR_BATCH_DIR"] = "/var/lib/governor" }, "GOVERNOR_BATCH_DIR"},
		"batch volume missing": {"base", func(m *manifests) { sidecarPod(m).Volumes = nil }, "does not define"},
		"batch dir on a sized emptyDir": {"base", func(m *manifests) {
			sidecarPod(m).Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("2Gi"))}}
		}, "evicts the pod"},
		"batch volume without fsGroup": {"shared", func(m *manifests) {
			sidecarPod(m).Volumes[0].VolumeSource = corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("2Gi")}}}}}}
			sidecarPod(m).SecurityContext.FSGroup = nil
		}, "fsGroup"},
		"privilege escalation": {"base", func(m *manifests) { app(m).SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }, "allowPrivilegeEscalation"},
		"capability kept":      {"base", func(m *manifests) { gov(m).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"} }, "capabilities"},
		"capability added": {"base", func(m *manifests) {
			gov(m).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}, "capabilities"},
		"privileged":              {"base", func(m *manifests) { gov(m).SecurityContext.Privileged = ptr.To(true) }, "privileged"},
		"unconfined seccomp":      {"base", func(m *manifests) { sidecarPod(m).SecurityContext.SeccompProfile = nil }, "seccomp"},
		"no memory limit":         {"base", func(m *manifests) { delete(gov(m).Resources.Limits, corev1.ResourceMemory) }, "limit for memory"},
		"GOMEMLIMIT at the limit": {"base", func(m *manifests) { setEnv(gov(m), "GOMEMLIMIT", "512MiB") }, "GOMEMLIMIT 512MiB leaves less"},
		"GOMEMLIMIT unset": {"shared", func(m *manifests) {
			gov(m).Env = slices.DeleteFunc(gov(m).Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
		}, "set GOMEMLIMIT"},
		"request over limit": {"base", func(m *manifests) {
			app(m).Resources.Requests[corev1.ResourceCPU] = app(m).Resources.Limits[corev1.ResourceCPU].DeepCopy()
			q := app(m).Resources.Requests[corev1.ResourceCPU]
			q.Add(q)
			app(m).Resources.Requests[corev1.ResourceCPU] = q
		}, "exceeds its limit"},
		"service account token": {"base", func(m *manifests) { sidecarPod(m).AutomountServiceAccountToken = nil }, "automountServiceAccountToken"},
		"selector mismatch": {"base", func(m *manifests) {
			m.deployments[0].Spec.Template.Labels = map[string]string{"app.kubernetes.io/name": "other"}
		}, "does not select its own pods"},
		"missing ConfigMap": {"base", func(m *manifests) { gov(m).EnvFrom[0].ConfigMapRef.Name = "governor" }, "not rendered"},
		"token unset":       {"shared", func(m *manifests) { gov(m).Env = gov(m).Env[1:] }, "GOVERNOR_API_TOKEN"},
		"token literal":     {"shared", func(m *manifests) { setEnv(gov(m), "GOVERNOR_API_TOKEN", "changeme") }, "GOVERNOR_API_TOKEN"},
		"token optional": {"shared", func(m *manifests) {
			gov(m).Env[0].ValueFrom.SecretKeyRef.Optional = ptr.To(true)
		}, "must not be optional"},
		"shared on loopback": {"shared", func(m *manifests) { config(m)["GOVERNOR_LISTEN"] = "127.0.0.1:8080" }, "a Service cannot reach it"},
		"service to admin": {"shared", func(m *manifests) {
			m.services[0].Spec.Ports[0].TargetPort = intstr.FromString("admin")
		}, "no Service sends traffic"},
		"service to nothing": {"shared", func(m *manifests) {
			m.services[0].Spec.Ports[0].TargetPort = intstr.FromString("htp")
		}, "is no port"},
		"service selects nothing": {"shared", func(m *manifests) {
			m.services[0].Spec.Selector = map[string]string{"app.kubernetes.io/name": "governer"}
		}, "selects no pod"},
		"budget blocks drains": {"shared", func(m *manifests) { m.deployments[0].Spec.Replicas = ptr.To[int32](1) }, "blocks every node drain"},
		"policy port name": {"shared", func(m *manifests) {
			p := intstr.FromString("metrics")
			m.networkPolicies[0].Spec.Ingress[1].Ports[0].Port = &p
		}, "no container of governor has a port named metrics"},
	} {
		t.Run(name, func(t *testing.T) {
			m := load(t, c.dir)
			require.Empty(t, m.problems(), "%s must be correct before the mistake", c.dir)
			c.mess(m)
			problems := m.problems()
			assert.True(t, slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }),
				"%s: want a problem mentioning %q, got %q", name, c.want, problems)
		})
	}
}
