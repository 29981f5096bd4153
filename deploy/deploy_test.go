// Package deploy holds the deployment files (docker-compose, Kubernetes). No Docker engine or
// cluster runs in CI, so this test parses them and checks that what they reference exists and
// that the outboxd configs they carry are valid for outboxd itself.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/internal/config"
)

type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     any               `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck map[string]any `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestDockerCompose(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(false)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kafka", "postgres", "mysql", "outboxd-postgres", "outboxd-mysql", "writer"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("service %s missing", want)
		}
	}
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither image nor build", name)
		}
		for dep, d := range s.DependsOn {
			ds, ok := c.Services[dep]
			if !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
			}
			if d.Condition == "service_healthy" && ds.Healthcheck == nil {
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("service %s mounts missing file %s", name, src)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s uses undeclared volume %s", name, src)
			}
		}
		// outboxd services: their config must load with the service's environment.
		if strings.HasPrefix(name, "outboxd-") {
			var cfgPath string
			for _, v := range s.Volumes {
				if parts := strings.Split(v, ":"); strings.HasSuffix(parts[0], ".yaml") {
					cfgPath = filepath.Join("..", parts[0])
				}
			}
			raw, err := os.ReadFile(cfgPath)
			if err != nil {
				t.Fatalf("service %s: %v", name, err)
			}
			cfg, err := config.Parse(raw, func(k string) (string, bool) { v, ok := s.Environment[k]; return v, ok })
			if err != nil {
				t.Errorf("service %s: its config does not load: %v", name, err)
				continue
			}
			// A MySQL run without a stored position and without source.mysql.start is refused
			// (issue 11): the demo's first run must say where to start.
			if cfg.Source.Type == "mysql" && cfg.Source.MySQL.Start == "" {
				t.Errorf("service %s: a mysql source needs source.mysql.start (the first run has no stored position)", name)
			}
			for _, br := range cfg.Kafka.Brokers {
				if host := strings.Split(br, ":")[0]; c.Services[host].Image == "" {
					t.Errorf("service %s: broker %s is not a compose service", name, br)
				}
			}
		}
	}
	mysql := strings.Join(toStrings(c.Services["mysql"].Command), " ")
	for _, want := range []string{"--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--gtid-mode=ON", "--server-id="} {
		if !strings.Contains(mysql, want) {
			t.Errorf("mysql service lacks %s", want)
		}
	}
	if pg := strings.Join(toStrings(c.Services["postgres"].Command), " "); !strings.Contains(pg, "wal_level=logical") {
		t.Errorf("postgres service lacks wal_level=logical")
	}
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, x.(string))
		}
	}
	return out
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas int `yaml:"replicas"`
		Template struct {
			Spec struct {
				Containers []struct {
					Args []string `yaml:"args"`
					Env  []struct {
						Name      string `yaml:"name"`
						ValueFrom struct {
							SecretKeyRef struct{ Name, Key string } `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					LivenessProbe  probe `yaml:"livenessProbe"`
					ReadinessProbe probe `yaml:"readinessProbe"`
					VolumeMounts   []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

func TestKubernetes(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	objs := map[string]k8sObject{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	d, ok := objs["Deployment/outboxd"]
	if !ok || d.Spec.Replicas != 2 {
		t.Fatalf("Deployment outboxd with 2 replicas missing: %+v", objs)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	// The standby replica answers 503 on /readyz by design: a readiness probe on it would stall
	// rolling updates, so both probes use /healthz.
	if ctr.LivenessProbe.HTTPGet.Path != "/healthz" || ctr.ReadinessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: %+v %+v", ctr.LivenessProbe, ctr.ReadinessProbe)
	}
	env := map[string]string{}
	secret := objs["Secret/outboxd-secrets"]
	for _, e := range ctr.Env {
		ref := e.ValueFrom.SecretKeyRef
		if _, ok := objs["Secret/"+ref.Name].StringData[ref.Key]; !ok {
			t.Errorf("env %s refers to missing secret key %s/%s", e.Name, ref.Name, ref.Key)
		}
		env[e.Name] = secret.StringData[ref.Key]
	}
	cm := objs["ConfigMap/"+d.Spec.Template.Spec.Volumes[0].ConfigMap.Name]
	raw, ok := cm.Data["outboxd.yaml"]
	if !ok || len(ctr.Args) != 3 || !strings.HasSuffix(ctr.Args[2], "/outboxd.yaml") || ctr.VolumeMounts[0].MountPath != filepath.Dir(ctr.Args[2]) {
		t.Fatalf("config map / args / mount do not line up: %v %v", ctr.Args, ctr.VolumeMounts)
	}
	cfg, err := config.Parse([]byte(raw), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the ConfigMap's outboxd.yaml does not load with the Deployment's env: %v", err)
	}
	if !strings.HasSuffix(cfg.HTTP.Listen, ":9464") || strings.HasPrefix(cfg.HTTP.Listen, "127.") || ctr.Ports[0].ContainerPort != 9464 {
		t.Errorf("http.listen %q must listen on the pod IP at the container port %d", cfg.HTTP.Listen, ctr.Ports[0].ContainerPort)
	}
	if cfg.Offsets.Store != "kafka" {
		t.Errorf("two replicas share no disk: offsets.store must be kafka, is %s", cfg.Offsets.Store)
	}
}
