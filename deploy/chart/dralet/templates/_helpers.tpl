{{/* The release's name for its objects: "<release>" when it already says dralet. */}}
{{- define "dralet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dralet.pluginName" -}}
{{- printf "%s-kubelet-plugin" (include "dralet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dralet.serviceAccountName" -}}
{{- default (include "dralet.pluginName" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "dralet.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: kubelet-plugin
{{- end -}}

{{- define "dralet.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: dralet
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The Kubernetes minor version the objects are for (32..38), from .Values.kubernetesVersion
or, when that is empty, the cluster's (.Capabilities.KubeVersion). Anything else fails.
*/}}
{{- define "dralet.kubeMinor" -}}
{{- $given := toString (default .Capabilities.KubeVersion.Version .Values.kubernetesVersion) -}}
{{- $found := regexFind "^v?1\\.[0-9]+" $given | trimPrefix "v" -}}
{{- if not $found -}}
{{- fail (printf "kubernetesVersion %q: expected 1.<minor>, e.g. 1.34" $given) -}}
{{- end -}}
{{- $minor := index (splitList "." $found) 1 | atoi -}}
{{- if or (lt $minor 32) (gt $minor 38) -}}
{{- fail (printf "Kubernetes %s (kubernetesVersion, else the cluster's): this chart supports 1.32 to 1.38" $found) -}}
{{- end -}}
{{- $minor -}}
{{- end -}}

{{/* resource.k8s.io/v1 is GA and served from 1.34 on; 1.32 and 1.33 serve v1beta1. */}}
{{- define "dralet.resourceApiVersion" -}}
{{- if ge (include "dralet.kubeMinor" . | atoi) 34 -}}
resource.k8s.io/v1
{{- else -}}
resource.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/*
"true" when driver pods get per-instance sockets and surge updates. The 1.33+ kubelet
keeps several instances of a driver, keyed by socket path; the 1.32 kubelet keeps one,
and deregisters the new pod when the old pod removes its socket.
*/}}
{{- define "dralet.seamless" -}}
{{- $minor := include "dralet.kubeMinor" . | atoi -}}
{{- if kindIs "invalid" .Values.seamlessUpgrade -}}
{{- ge $minor 33 -}}
{{- else if and .Values.seamlessUpgrade (lt $minor 33) -}}
{{- fail "seamlessUpgrade: needs Kubernetes 1.33 or later (the 1.32 kubelet keeps one plugin instance per driver)" -}}
{{- else -}}
{{- .Values.seamlessUpgrade -}}
{{- end -}}
{{- end -}}

{{- define "dralet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
