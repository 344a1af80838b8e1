{{/*
Naming, labels and the policy-to-flag mapping shared by every template.
*/}}

{{- define "walras.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource-name prefix: the release name, plus the chart name unless the release already has it. */}}
{{- define "walras.fullname" -}}
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

{{- define "walras.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "walras.labels" -}}
helm.sh/chart: {{ include "walras.chart" . }}
app.kubernetes.io/name: {{ include "walras.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: walras
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels; "component" separates the controller from the agent. Call with (list . "controller"). */}}
{{- define "walras.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "walras.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "walras.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* values `policy` (camelCase) -> `walras operator --policy` (kebab-case). */}}
{{- define "walras.policyFlag" -}}
{{- /* values.schema.json's enum is the policy registry (walras.core.policies.names()). */ -}}
{{- .Values.policy }}
{{- end }}

{{/* Refuse combinations that would run but misbehave. */}}
{{- define "walras.validate" -}}
{{- if and (eq .Values.policy "psdsf-distributed") (not .Values.agent.enabled) }}
{{- fail "policy psdsf-distributed needs the node agents: set agent.enabled=true" }}
{{- end }}
{{- /* The operator reads the agents' tasks in its own mode: the two must agree. */ -}}
{{- $distributed := index (.Values.policyArgs | default dict) "psdsf-distributed" | default dict }}
{{- if and (eq .Values.policy "psdsf-distributed") (ne ($distributed.mode | default "tdm") .Values.agent.mode) }}
{{- fail (printf "policyArgs.psdsf-distributed.mode (%s) must equal agent.mode (%s)" ($distributed.mode | default "tdm") .Values.agent.mode) }}
{{- end }}
{{- if and (gt (int .Values.controller.replicas) 1) (not .Values.controller.leaderElection.enabled) }}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled=true (otherwise every replica writes)" }}
{{- end }}
{{- $pdb := .Values.controller.podDisruptionBudget }}
{{- if and $pdb.enabled (kindIs "invalid" $pdb.minAvailable) (kindIs "invalid" $pdb.maxUnavailable) }}
{{- fail "controller.podDisruptionBudget needs minAvailable or maxUnavailable" }}
{{- end }}
{{- end }}

{{/* Environment every Walras container gets: the image writes only under /tmp (read-only root). */}}
{{- define "walras.commonEnv" -}}
- name: HOME
  value: /tmp
- name: MPLCONFIGDIR
  value: /tmp/matplotlib
- name: XDG_CACHE_HOME
  value: /tmp/.cache
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}
