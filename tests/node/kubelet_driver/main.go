// Command kubelet-driver runs the kubelet's own device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) outside a kubelet, so gpugov's device plugin
// can be tested against the real peer: registration, ListAndWatch, GetPreferredAllocation and
// Allocate all go through the upstream code.
//
// Usage: kubelet-driver -dir PLUGIN_DIR
//
// It serves kubelet.sock in PLUGIN_DIR (the upstream constructor hard-codes
// /var/lib/kubelet/device-plugins; the package's unexported constructor, which takes the socket
// path, is reached with go:linkname). Commands arrive one JSON object per line on stdin and each
// gets one JSON line on stdout, in order — pods are admitted one at a time, as the kubelet's
// sync loop does:
//
//	{"op":"capacity"}   -> {"ok":true,"capacity":{res:n},"allocatable":{res:n},
//	                       "allocatableDevices":{res:{id:health}}} (healthy, as GetAllocatableDevices)
//	{"op":"admit","pod":{"uid","name","namespace","containers":[{"name","limits":{res:n}}],
//	                     "initContainers":[{"name","limits":{res:n},"restartPolicy":"Always"?}]}}
//	                    -> {"ok":true,"containers":[{"name","init","deviceIDs":{res:[id]},"options":{...}}]}
//	                       (init containers first, in the order the kubelet admits them)
//	                       or {"ok":false,"error":"..."} (what the kubelet puts in UnexpectedAdmissionError)
//	{"op":"remove","uid":UID} -> the pod is no longer active; its devices are freed on the next admit
//	{"op":"stop"}       -> stops the manager and exits (stdin EOF does the same)
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/info/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*devicemanager.ManagerImpl, error)

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

type containerSpec struct {
	Name          string           `json:"name"`
	Limits        map[string]int64 `json:"limits"`
	RestartPolicy string           `json:"restartPolicy,omitempty"` // "Always": a sidecar
}

type podSpec struct {
	UID            string          `json:"uid"`
	Name           string          `json:"name"`
	Namespace      string          `json:"namespace"`
	Containers     []containerSpec `json:"containers"`
	InitContainers []containerSpec `json:"initContainers,omitempty"`
}

type command struct {
	Op  string  `json:"op"`
	Pod podSpec `json:"pod"`
	UID string  `json:"uid"`
}

type driver struct {
	m      *devicemanager.ManagerImpl
	mu     sync.Mutex
	active map[string]*v1.Pod
}

func (d *driver) activePods() []*v1.Pod {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*v1.Pod, 0, len(d.active))
	for _, p := range d.active {
		out = append(out, p)
	}
	return out
}

func toContainer(c containerSpec) v1.Container {
	limits := v1.ResourceList{}
	for name, n := range c.Limits {
		limits[v1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	out := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{Limits: limits, Requests: limits}}
	if c.RestartPolicy != "" {
		policy := v1.ContainerRestartPolicy(c.RestartPolicy)
		out.RestartPolicy = &policy
	}
	return out
}

func toPod(s podSpec) *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(s.UID)
	pod.Name = s.Name
	pod.Namespace = s.Namespace
	for _, c := range s.InitContainers {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, toContainer(c))
	}
	for _, c := range s.Containers {
		pod.Spec.Containers = append(pod.Spec.Containers, toContainer(c))
	}
	return pod
}

func (d *driver) capacity() map[string]any {
	capacity, allocatable, _ := d.m.GetCapacity()
	caps, allocs := map[string]int64{}, map[string]int64{}
	for k, v := range capacity {
		caps[string(k)] = v.Value()
	}
	for k, v := range allocatable {
		allocs[string(k)] = v.Value()
	}
	devices := map[string]map[string]string{}
	for res, devs := range d.m.GetAllocatableDevices() {
		devices[res] = map[string]string{}
		for id, dev := range devs {
			devices[res][id] = dev.Health
		}
	}
	return map[string]any{"ok": true, "capacity": caps, "allocatable": allocs, "allocatableDevices": devices}
}

func (d *driver) admit(s podSpec) map[string]any {
	pod := toPod(s)
	d.mu.Lock()
	d.active[s.UID] = pod // the kubelet counts a pod active from admission on
	d.mu.Unlock()
	var out []map[string]any
	// the kubelet's admit handler: init containers first, then the app containers
	all := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	inits := len(pod.Spec.InitContainers)
	for i := range pod.Spec.InitContainers {
		all = append(all, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		all = append(all, &pod.Spec.Containers[i])
	}
	for _, c := range all { // admission: every container's devices before any starts
		if err := d.m.Allocate(pod, c); err != nil {
			d.mu.Lock()
			delete(d.active, s.UID) // a rejected pod never runs
			d.mu.Unlock()
			return map[string]any{"ok": false, "error": err.Error()}
		}
	}
	for i, c := range all { // then each container's run options, as it starts
		opts, err := d.m.GetDeviceRunContainerOptions(pod, c)
		if err != nil {
			return map[string]any{"ok": false, "error": err.Error()}
		}
		ids := map[string][]string{}
		for res, devs := range d.m.GetDevices(s.UID, c.Name) {
			list := make([]string, 0, len(devs))
			for id := range devs {
				list = append(list, id)
			}
			sort.Strings(list)
			ids[res] = list
		}
		out = append(out, map[string]any{"name": c.Name, "init": i < inits, "deviceIDs": ids, "options": opts})
	}
	return map[string]any{"ok": true, "containers": out}
}

func main() {
	dir := flag.String("dir", "", "plugin directory (kubelet.sock is created there)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "kubelet-driver: -dir is required")
		os.Exit(2)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-driver:", err)
		os.Exit(2)
	}
	m, err := newManagerImpl(filepath.Join(abs, "kubelet.sock"), nil, topologymanager.NewFakeManager())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-driver:", err)
		os.Exit(1)
	}
	d := &driver{m: m, active: map[string]*v1.Pod{}}
	if err := m.Start(d.activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-driver: start:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	_ = enc.Encode(map[string]any{"ok": true, "ready": filepath.Join(abs, "kubelet.sock")})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = enc.Encode(map[string]any{"ok": false, "error": "bad command: " + err.Error()})
			continue
		}
		switch c.Op {
		case "capacity":
			_ = enc.Encode(d.capacity())
		case "admit":
			_ = enc.Encode(d.admit(c.Pod))
		case "remove":
			d.mu.Lock()
			delete(d.active, c.UID)
			d.mu.Unlock()
			_ = enc.Encode(map[string]any{"ok": true})
		case "stop":
			_ = m.Stop()
			_ = enc.Encode(map[string]any{"ok": true})
			return
		default:
			_ = enc.Encode(map[string]any{"ok": false, "error": "unknown op " + c.Op})
		}
	}
	_ = m.Stop()
}
