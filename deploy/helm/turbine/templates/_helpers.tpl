{{/* Names, labels and the pieces every member's pod spec shares (docs/kubernetes.md). */}}

{{- define "turbine.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "turbine.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's object name: "<fullname>-<suffix>", at most 63 characters. */}}
{{- define "turbine.componentName" -}}
{{- printf "%s-%s" (include "turbine.fullname" .root) .suffix | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "turbine.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of a component: call with (dict "root" $ "component" "frontend"). */}}
{{- define "turbine.selectorLabels" -}}
app.kubernetes.io/name: {{ include "turbine.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "turbine.labels" -}}
helm.sh/chart: {{ include "turbine.chart" .root }}
{{ include "turbine.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: turbine
{{- end }}

{{- define "turbine.image" -}}
{{- $img := .image | default dict }}
{{- $repo := $img.repository | default .root.Values.image.repository }}
{{- if $img.digest }}
{{- printf "%s@%s" $repo $img.digest }}
{{- else if and (not $img.repository) .root.Values.image.digest }}
{{- printf "%s@%s" $repo .root.Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (toString ($img.tag | default .root.Values.image.tag | default .root.Chart.AppVersion)) }}
{{- end }}
{{- end }}

{{- define "turbine.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "turbine.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "turbine.authSecret" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecret }}{{ else }}{{ include "turbine.componentName" (dict "root" . "suffix" "auth") }}{{ end }}
{{- end }}

{{- define "turbine.hasAuth" -}}
{{- if or .Values.auth.existingSecret .Values.auth.apiKeys .Values.auth.adminApiKeys }}true{{ end }}
{{- end }}

{{- define "turbine.consulTokenSecret" -}}
{{- if .Values.consul.acl.existingSecret }}{{ .Values.consul.acl.existingSecret }}{{ else }}{{ include "turbine.componentName" (dict "root" . "suffix" "consul-acl") }}{{ end }}
{{- end }}

{{/* --discovery of every member. */}}
{{- define "turbine.discovery" -}}
{{- if .Values.consul.enabled }}
{{- printf "consul://%s:8500" (include "turbine.componentName" (dict "root" . "suffix" "consul")) }}
{{- else if .Values.consul.address }}
{{- printf "consul://%s" .Values.consul.address }}
{{- else }}
{{- fail "consul.enabled is false: set consul.address to an existing Consul agent (HOST:PORT)" }}
{{- end }}
{{- end }}

{{/*
Cluster arguments of a member: call with (dict "root" $ "port" N). Members bind 0.0.0.0
and advertise their pod IP.
*/}}
{{- define "turbine.clusterArgs" -}}
{{- $v := .root.Values }}
- --discovery={{ include "turbine.discovery" .root }}
- --cluster-name={{ $v.cluster.name }}
- --member-host=0.0.0.0
- --member-port={{ .port }}
- --advertise-host=$(POD_IP)
- --log-format={{ $v.cluster.log.format }}
- --log-level={{ $v.cluster.log.level }}
{{- with $v.cluster.consulTTL }}
- --consul-ttl={{ . }}
{{- end }}
{{- with $v.cluster.consulTTLRefresh }}
- --consul-ttl-refresh={{ . }}
{{- end }}
{{- with $v.cluster.consulDeregisterAfter }}
- --consul-deregister-after={{ . }}
{{- end }}
{{- if $v.consul.tls.enabled }}
- --consul-cacert=/etc/turbine/consul-tls/ca.crt
{{- if $v.consul.tls.clientCert }}
- --consul-client-cert=/etc/turbine/consul-tls/tls.crt
- --consul-client-key=/etc/turbine/consul-tls/tls.key
{{- end }}
{{- with $v.consul.tls.serverName }}
- --consul-tls-server-name={{ . }}
{{- end }}
{{- end }}
{{- if $v.tls.member.enabled }}
- --member-tls-cert=/etc/turbine/member-tls/tls.crt
- --member-tls-key=/etc/turbine/member-tls/tls.key
- --member-tls-ca=/etc/turbine/member-tls/ca.crt
{{- end }}
{{- end }}

{{/* Tracing arguments (frontend, node, epp). */}}
{{- define "turbine.tracingArgs" -}}
{{- with .Values.tracing }}
{{- if .otlpEndpoint }}
- --otlp-endpoint={{ .otlpEndpoint }}
{{- if .insecure }}
- --otlp-insecure=true
{{- end }}
{{- if .sampleRatio }}
- --trace-sample-ratio={{ .sampleRatio }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Environment of every member: its pod IP and name, the node's IP, the cache, the Consul token. */}}
{{- define "turbine.clusterEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
- name: TURBINE_CACHE_DIR
  value: /var/cache/turbine
{{- if .Values.consul.acl.enabled }}
- name: TURBINE_CONSUL_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "turbine.consulTokenSecret" . }}
      key: {{ .Values.consul.acl.tokenKey }}
{{- end }}
{{- end }}

{{/* Volume mounts of every member container. */}}
{{- define "turbine.clusterVolumeMounts" -}}
- name: cache
  mountPath: /var/cache/turbine
- name: tmp
  mountPath: /tmp
{{- if .Values.consul.tls.enabled }}
- name: consul-tls
  mountPath: /etc/turbine/consul-tls
  readOnly: true
{{- end }}
{{- if .Values.tls.member.enabled }}
- name: member-tls
  mountPath: /etc/turbine/member-tls
  readOnly: true
{{- end }}
{{- end }}

{{/* Volumes of every member pod. */}}
{{- define "turbine.clusterVolumes" -}}
- name: cache
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if .Values.consul.tls.enabled }}
- name: consul-tls
  secret:
    secretName: {{ required "consul.tls.existingSecret is required when consul.tls.enabled" .Values.consul.tls.existingSecret }}
{{- end }}
{{- if .Values.tls.member.enabled }}
{{- if .Values.tls.member.volume }}
- name: member-tls
  {{- toYaml .Values.tls.member.volume | nindent 2 }}
{{- else }}
- name: member-tls
  secret:
    secretName: {{ required "tls.member.secretName (or tls.member.volume) is required when tls.member.enabled" .Values.tls.member.secretName }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A node pool: nodePoolDefaults, then the entry's keys (maps such as kvbm and pdb merged one
level down, so that a false or empty value in the entry wins), then the per-role
overrides of .Values.pools. Call with (dict "root" $ "pool" $p); returns YAML for fromYaml.
*/}}
{{- define "turbine.pool" -}}
{{- $root := .root }}
{{- $p := deepCopy ($root.Values.nodePoolDefaults | default dict) }}
{{- range $k, $v := .pool }}
{{- $d := index $p $k }}
{{- if and (kindIs "map" $v) (kindIs "map" $d) }}
{{- range $k2, $v2 := $v }}{{ $_ := set $d $k2 $v2 }}{{ end }}
{{- else }}
{{- $_ := set $p $k $v }}
{{- end }}
{{- end }}
{{- if not $p.name }}{{ fail "every nodePools entry needs a name" }}{{ end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $p.name)) }}{{ fail (printf "nodePools[%s]: name must be a DNS label (lower case letters, digits, '-')" $p.name) }}{{ end }}
{{- $role := $p.role | default "aggregated" }}
{{- if not (has $role (list "aggregated" "prefill" "decode")) }}{{ fail (printf "nodePools[%s]: role %q, want aggregated, prefill or decode" $p.name $role) }}{{ end }}
{{- $_ := set $p "role" $role }}
{{- $engine := $p.engine | default "mock" }}
{{- if eq $engine "mocker" }}{{ $engine = "mock" }}{{ end }}
{{- if not (has $engine (list "mock" "vllm" "sglang" "trtllm")) }}{{ fail (printf "nodePools[%s]: engine %q, want mock, vllm, sglang or trtllm" $p.name $engine) }}{{ end }}
{{- $_ := set $p "engine" $engine }}
{{- $kind := $p.kind | default "Deployment" }}
{{- if not (has $kind (list "Deployment" "StatefulSet")) }}{{ fail (printf "nodePools[%s]: kind %q, want Deployment or StatefulSet" $p.name $kind) }}{{ end }}
{{- $_ := set $p "kind" $kind }}
{{- $o := index ($root.Values.pools | default dict) $role | default dict }}
{{- if hasKey $o "replicas" }}{{ $_ := set $p "replicas" $o.replicas }}{{ end }}
{{- if hasKey $o "tensorParallelSize" }}{{ $_ := set $p "tensorParallelSize" $o.tensorParallelSize }}{{ end }}
{{- $res := deepCopy ($p.resources | default dict) }}
{{- range $k, $v := ($o.resources | default dict) }}
{{- $_ := set $res $k (merge (deepCopy $v) (index $res $k | default dict)) }}
{{- end }}
{{- $workers := int ($p.workers | default 0) }}
{{- if lt $workers 0 }}{{ fail (printf "nodePools[%s]: workers %d < 0" $p.name $workers) }}{{ end }}
{{- $_ := set $p "workers" $workers }}
{{- $tp := int ($p.tensorParallelSize | default 0) }}
{{- if and (ne $engine "mock") (lt $tp 1) }}{{ $tp = 1 }}{{ end }}
{{- $_ := set $p "tensorParallelSize" $tp }}
{{- $gpus := 0 }}
{{- if ne (toString $p.gpus) "" }}
{{- $gpus = int $p.gpus }}
{{- else if ne $engine "mock" }}
{{- $gpus = mul $workers $tp }}
{{- end }}
{{- $lim := $res.limits | default dict }}
{{- if hasKey $lim "nvidia.com/gpu" }}{{ $gpus = int (index $lim "nvidia.com/gpu") }}{{ end }}
{{- if gt $gpus 0 }}
{{- $_ := set $res "limits" (set ($res.limits | default dict) "nvidia.com/gpu" $gpus) }}
{{- $_ := set $res "requests" (set ($res.requests | default dict) "nvidia.com/gpu" $gpus) }}
{{- end }}
{{- $_ := set $p "gpus" $gpus }}
{{- $_ := set $p "resources" $res }}
{{- $ip := $p.inferencePool }}
{{- if eq (toString $ip) "" }}{{ $ip = has $role (list "aggregated" "decode") }}{{ end }}
{{- $_ := set $p "inferencePool" $ip }}
{{- $_ := set $p "replicas" (int $p.replicas) }}
{{- if not (has $p.kvbm.mode (list "inProcess" "sidecar")) }}{{ fail (printf "nodePools[%s]: kvbm.mode %q, want inProcess or sidecar" $p.name $p.kvbm.mode) }}{{ end }}
{{- $_ := set $p "objectName" (include "turbine.componentName" (dict "root" $root "suffix" (printf "node-%s" $p.name))) }}
{{- toYaml $p }}
{{- end }}

{{/* The node pools the planner scales, as a dict role → pool name (empty when off). */}}
{{- define "turbine.plannerPools" -}}
{{- $out := dict }}
{{- if .Values.planner.enabled }}
{{- $want := ternary (list "prefill" "decode") (list "aggregated") .Values.planner.disaggregated }}
{{- range $role := $want }}
{{- $name := index $.Values.planner (printf "%sPool" $role) }}
{{- if not $name }}
{{- range $p := $.Values.nodePools }}{{ if and (not $name) (eq ($p.role | default "aggregated") $role) }}{{ $name = $p.name }}{{ end }}{{ end }}
{{- end }}
{{- if not $name }}{{ fail (printf "planner.enabled: no node pool of role %s (set planner.%sPool)" $role $role) }}{{ end }}
{{- $_ := set $out $role $name }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}
