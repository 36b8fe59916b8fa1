package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The monitoring bundle: a Grafana dashboard and alerting rules, as a plain
// Prometheus rules file and as a PrometheusRule.
const (
	rulesFile      = "monitoring/governor-rules.yaml"
	rulesTestFile  = "monitoring/governor-rules.test.yaml"
	prometheusRule = "monitoring/prometheusrule.yaml"
	dashboardFile  = "monitoring/grafana-dashboard.json"
	podMonitor     = "monitoring/podmonitor.yaml"
)

// promtool returns promtool's path. Without it the test is skipped, unless
// GOVERNOR_CI is set (CI installs it: Debian's prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("GOVERNOR_CI") != "" {
			t.Fatal("promtool is not on PATH (Debian package prometheus)")
		}
		t.Skip("promtool is not on PATH (Debian package prometheus)")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// The rules are valid, and their unit tests (which make each alert fire
// on the series it is about, and not on its neighbours) pass.
func TestRulesCheckAndTest(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
	runPromtool(t, "test", "rules", rulesTestFile)
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, v), path)
}

// The PrometheusRule carries exactly the rules of the plain file.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	var plain ruleGroups
	readYAML(t, rulesFile, &plain)
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec ruleGroups `json:"spec"`
	}
	readYAML(t, prometheusRule, &pr)
	assert.Equal(t, "monitoring.coreos.com/v1", pr.APIVersion)
	assert.Equal(t, "PrometheusRule", pr.Kind)
	assert.NotEmpty(t, pr.Metadata.Name)
	assert.Equal(t, plain, pr.Spec)
	require.NotEmpty(t, plain.Groups)

	// Each of the operator's concerns has its alert.
	var alerts []string
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			assert.NotEmpty(t, r.Labels["severity"], r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
		}
	}
	for _, want := range []string{"GovernorLaneCollapsed", "GovernorLanePaused", "GovernorRateLimitsAbsorbed",
		"GovernorProviderBudgetBinds", "GovernorQueueWaitHigh", "GovernorCallsFailing", "GovernorUpstreamUnreachable", "GovernorTurningCallsAway",
		"GovernorRedisCoordinationLost", "GovernorDraining"} {
		assert.Contains(t, alerts, want)
	}
}

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// dashboardExprs returns the dashboard's queries with Grafana's variables
// replaced, so that they are plain PromQL.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	d := readDashboard(t)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Panels)
	ids := map[int]bool{}
	var exprs []string
	r := strings.NewReplacer("$__rate_interval", "5m", "$lane", ".*", "$instance", ".*")
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		assert.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			exprs = append(exprs, r.Replace(tg.Expr))
		}
	}
	return exprs
}

// Every query of the dashboard is valid PromQL: promtool checks them as
// the expressions of recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	exprs := dashboardExprs(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, err := json.Marshal(e) // a JSON string is a YAML string
		require.NoError(t, err)
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	runPromtool(t, "check", "rules", path)
}

var metricName = regexp.MustCompile(`\bgovernor_[a-z0-9_]+`)

// Every metric the dashboard and the rules use is one a running Governor
// exports: a Governor started with -demo (its simulated provider), and a
// Redis URL so that it exports the coordination metrics (nothing listens
// there: it governs alone, and says so), after a call, a stream and a
// batch.
func TestMonitoringMetricsAreExported(t *testing.T) {
	var used []string
	var rules ruleGroups
	readYAML(t, rulesFile, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			used = append(used, metricName.FindAllString(r.Expr, -1)...)
		}
	}
	for _, e := range dashboardExprs(t) {
		used = append(used, metricName.FindAllString(e, -1)...)
	}
	slices.Sort(used)
	used = slices.Compact(used)
	require.NotEmpty(t, used)

	exported, scrape := scrapeRunningGovernor(t)
	for _, name := range used {
		assert.True(t, exported[name], "%s is used by the monitoring bundle but not exported by Governor", name)
	}

	// promtool's lint of the exposition finds nothing wrong with
	// Governor's own families (the Go runtime's and the process's, which
	// the metrics library writes without HELP lines, are not Governor's).
	lint := exec.Command(promtool(t), "check", "metrics")
	lint.Stdin = strings.NewReader(scrape)
	out, _ := lint.CombinedOutput() // exit status 3 for the go_* and process_* findings
	for line := range strings.Lines(string(out)) {
		assert.False(t, strings.HasPrefix(line, "governor_"), "promtool check metrics: %s", line)
	}
}

// scrapeRunningGovernor builds and starts Governor, makes calls through it
// and returns the names of the samples on its /metrics, and the scrape.
func scrapeRunningGovernor(t *testing.T) (map[string]bool, string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "governor")
	build := exec.Command("go", "build", "-o", bin, "./cmd/governor")
	build.Dir = ".."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)

	// Governor binds ports of its own choosing and reports them in its
	// start-up line: ports picked free here could be taken before it binds.
	closedPort := "127.0.0.1:1" // nobody listens (tcpmux): Redis is down
	cmd := exec.Command(bin, "-demo")
	cmd.Env = append(os.Environ(), "GOVERNOR_LISTEN=127.0.0.1:0", "GOVERNOR_ADMIN_LISTEN=127.0.0.1:0",
		"GOVERNOR_LOG_FORMAT=json", "GOVERNOR_LOG_LEVEL=info", "GOVERNOR_REDIS_URL=redis://"+closedPort)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	type started struct{ Listen, AdminListen string }
	up := make(chan started, 1)
	logs := make(chan string, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			var line struct {
				Msg         string `json:"msg"`
				Listen      string `json:"listen"`
				AdminListen string `json:"admin_listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "governor started" {
				up <- started{line.Listen, line.AdminListen}
			}
		}
		logs <- all.String()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("governor's log:\n%s", <-logs)
		}
	})
	var listen, admin string
	select {
	case s := <-up:
		listen, admin = s.Listen, s.AdminListen
	case <-time.After(30 * time.Second):
		t.Fatal("governor never reported that it started")
	}

	c := &http.Client{Timeout: 30 * time.Second}
	require.Eventually(t, func() bool {
		resp, err := c.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 30*time.Second, 20*time.Millisecond, "governor never became ready")

	post := func(path, body string) {
		resp, err := c.Post("http://"+listen+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "%s: %s", path, b)
	}
	post("/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`)
	post("/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello"}]}`)
	post("/governor/batch", `{"requests":[{"url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}]}},`+
		`{"url":"/anthropic/v1/messages","body":{"model":"claude-3-5-haiku","max_tokens":20,"messages":[{"role":"user","content":"b"}]}}]}`)

	resp, err := c.Get("http://" + admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	names := map[string]bool{}
	for line := range strings.Lines(string(body)) {
		if line == "\n" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, string(body)
}

// The PodMonitor scrapes the admin port of the pods of both examples.
func TestPodMonitorScrapesTheExamples(t *testing.T) {
	var pm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchExpressions []struct {
					Key      string   `json:"key"`
					Operator string   `json:"operator"`
					Values   []string `json:"values"`
				} `json:"matchExpressions"`
			} `json:"selector"`
			PodMetricsEndpoints []struct {
				Port     string `json:"port"`
				Path     string `json:"path"`
				Interval string `json:"interval"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	readYAML(t, podMonitor, &pm)
	assert.Equal(t, "monitoring.coreos.com/v1", pm.APIVersion)
	assert.Equal(t, "PodMonitor", pm.Kind)
	require.Len(t, pm.Spec.PodMetricsEndpoints, 1)
	ep := pm.Spec.PodMetricsEndpoints[0]
	assert.Equal(t, "/metrics", ep.Path)
	require.Len(t, pm.Spec.Selector.MatchExpressions, 1)
	sel := pm.Spec.Selector.MatchExpressions[0]
	require.Equal(t, "app.kubernetes.io/name", sel.Key)
	require.Equal(t, "In", sel.Operator)

	for _, dir := range []string{"base", "shared"} {
		m := load(t, dir)
		found := false
		for _, d := range m.deployments {
			pod := d.Spec.Template
			if !slices.Contains(sel.Values, pod.Labels["app.kubernetes.io/name"]) {
				continue
			}
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				for _, p := range c.Ports {
					if c.Name == "governor" && p.Name == ep.Port {
						found = true
					}
				}
			}
		}
		assert.True(t, found, "the PodMonitor finds no governor container with a port named %q in %s", ep.Port, dir)
	}
}
