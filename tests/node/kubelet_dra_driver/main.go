// Command kubelet-dra-driver runs the kubelet's own DRA manager
// (k8s.io/kubernetes/pkg/kubelet/cm/dra) and plugin watcher (pkg/kubelet/pluginmanager) outside
// a kubelet, so gpugov's DRA kubelet plugin is tested against the real peer: registration
// through the plugin-registry folder, NodePrepareResources / NodeUnprepareResources over gRPC,
// the claim checks the kubelet makes (allocated, reserved for the pod) and the CDI device IDs it
// hands to the container runtime.
//
// Usage: kubelet-dra-driver -registry DIR -state DIR -kubeconfig FILE -node NAME
//
// Commands arrive one JSON object per line on stdin; each gets one JSON line on stdout:
//
//	{"op":"registered","driver":D} -> {"ok":true,"registered":bool}
//	{"op":"prepare","namespace":NS,"name":POD}
//	    -> {"ok":true,"containers":[{"name","cdiDevices":[...]}]} or {"ok":false,"error":"..."}
//	       (init containers first, then containers, as the kubelet starts them)
//	{"op":"unprepare","namespace":NS,"name":POD} -> {"ok":true} or {"ok":false,"error"}
//	{"op":"stop"} -> exits (stdin EOF does the same)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginregistration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

type command struct {
	Op        string `json:"op"`
	Driver    string `json:"driver"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type peer struct {
	m      *dra.Manager
	client kubernetes.Interface
	node   string
	mu     sync.Mutex
	active map[string]*v1.Pod // namespace/name -> pod as prepared
}

func (p *peer) activePods() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*v1.Pod, 0, len(p.active))
	for _, pod := range p.active {
		out = append(out, pod)
	}
	return out
}

func (p *peer) getNode() (*v1.Node, error) {
	return p.client.CoreV1().Nodes().Get(context.Background(), p.node, metav1.GetOptions{})
}

func (p *peer) prepare(ctx context.Context, c command) map[string]any {
	pod, err := p.client.CoreV1().Pods(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return map[string]any{"ok": false, "error": err.Error()}
	}
	if err := p.m.PrepareResources(ctx, pod); err != nil {
		return map[string]any{"ok": false, "error": err.Error()}
	}
	p.mu.Lock()
	p.active[c.Namespace+"/"+c.Name] = pod
	p.mu.Unlock()
	var out []map[string]any
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		info, err := p.m.GetResources(pod, &all[i])
		if err != nil {
			return map[string]any{"ok": false, "error": err.Error()}
		}
		ids := []string{}
		for _, d := range info.CDIDevices {
			ids = append(ids, d.Name)
		}
		out = append(out, map[string]any{"name": all[i].Name, "cdiDevices": ids})
	}
	return map[string]any{"ok": true, "containers": out}
}

func (p *peer) unprepare(ctx context.Context, c command) map[string]any {
	key := c.Namespace + "/" + c.Name
	p.mu.Lock()
	pod := p.active[key]
	p.mu.Unlock()
	if pod == nil {
		got, err := p.client.CoreV1().Pods(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return map[string]any{"ok": false, "error": err.Error()}
		}
		pod = got
	}
	if err := p.m.UnprepareResources(ctx, pod); err != nil {
		return map[string]any{"ok": false, "error": err.Error()}
	}
	p.mu.Lock()
	delete(p.active, key)
	p.mu.Unlock()
	return map[string]any{"ok": true}
}

func main() {
	registry := flag.String("registry", "", "plugin registry folder (the kubelet's plugins_registry)")
	state := flag.String("state", "", "the DRA manager's checkpoint folder")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	node := flag.String("node", "", "node name")
	klog.InitFlags(nil)
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) {
		_ = out.Encode(map[string]any{"ok": false, "error": err.Error()})
		os.Exit(1)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail(err)
	}
	logger := klog.Background()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	m, err := dra.NewManager(logger, client, *state)
	if err != nil {
		fail(err)
	}
	p := &peer{m: m, client: client, node: *node, active: map[string]*v1.Pod{}}
	if err := m.Start(ctx, p.activePods, p.getNode, sourcesReady{}); err != nil {
		fail(err)
	}
	pm := pluginmanager.NewPluginManager(*registry, &record.FakeRecorder{})
	pm.AddHandler(pluginregistration.DRAPlugin, m.GetWatcherHandler())
	stop := make(chan struct{})
	go pm.Run(sourcesReady{}, stop)
	_ = out.Encode(map[string]any{"ok": true})

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = out.Encode(map[string]any{"ok": false, "error": fmt.Sprintf("bad command: %v", err)})
			continue
		}
		switch c.Op {
		case "registered":
			_, err := m.GetWatcherHandler().(*draplugin.DRAPluginManager).GetPlugin(c.Driver)
			_ = out.Encode(map[string]any{"ok": true, "registered": err == nil})
		case "prepare":
			_ = out.Encode(p.prepare(ctx, c))
		case "unprepare":
			_ = out.Encode(p.unprepare(ctx, c))
		case "stop":
			close(stop)
			return
		default:
			_ = out.Encode(map[string]any{"ok": false, "error": "unknown op " + c.Op})
		}
	}
	close(stop)
}
