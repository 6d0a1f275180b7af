{{/* Base name of the objects: the release name, or <release>-<chart>. */}}
{{- define "nfsrdma-csi.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; pass a dict with "root" and "component". */}}
{{- define "nfsrdma-csi.labels" -}}
{{ include "nfsrdma-csi.selectorLabels" . }}
app.kubernetes.io/part-of: nfsrdma-csi
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- with .root.Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels; pass a dict with "root" and "component". */}}
{{- define "nfsrdma-csi.selectorLabels" -}}
app.kubernetes.io/name: nfsrdma-csi
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference from a .Values.image entry; pass a dict with "root" and "image". */}}
{{- define "nfsrdma-csi.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret of the CA of the nodes' certificates. */}}
{{- define "nfsrdma-csi.nodeCASecret" -}}
{{- .Values.nodeCertificates.caSecretName | default (printf "%s-node-ca" (include "nfsrdma-csi.fullname" .)) -}}
{{- end }}

{{/* The node certificate file the node plugin keeps and mounts present. */}}
{{- define "nfsrdma-csi.nodeCertFile" -}}
{{- printf "%s/tls/node.pem" .Values.node.stateDir -}}
{{- end }}

{{/* The export server's Service name. */}}
{{- define "nfsrdma-csi.serverName" -}}
{{- printf "%s-server" (include "nfsrdma-csi.fullname" .) -}}
{{- end -}}

{{/* Hardened container securityContext for unprivileged containers. */}}
{{- define "nfsrdma-csi.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* A CIDR from an address or a CIDR (an address becomes /32 or /128). */}}
{{- define "nfsrdma-csi.cidr" -}}
{{- if contains "/" . -}}
{{- . -}}
{{- else if contains ":" . -}}
{{- printf "%s/128" . -}}
{{- else -}}
{{- printf "%s/32" . -}}
{{- end -}}
{{- end -}}

{{/* The export server's NFS, MOUNT, NFS/RDMA, NLM and NSM ports, as NetworkPolicy ports. */}}
{{- define "nfsrdma-csi.nfsPorts" -}}
- port: nfs
  protocol: TCP
- port: mount
  protocol: TCP
- port: nfs-rdma
  protocol: TCP
- port: nlm
  protocol: TCP
- port: nsm
  protocol: TCP
{{- end -}}
