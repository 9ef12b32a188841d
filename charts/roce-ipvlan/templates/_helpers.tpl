{{- define "roce-ipvlan.labels" -}}
app.kubernetes.io/name: roce-ipvlan
app.kubernetes.io/part-of: roce-ipvlan
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "roce-ipvlan.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* A roce-ipvlan NAD: dict "name" "master" (optional) "resourceName" (optional) "root" $ */}}
{{- define "roce-ipvlan.nad" -}}
{{- $conf := dict "cniVersion" "1.0.0" "name" .name "type" "roce-ipvlan" "ipam" .root.Values.nads.ipam -}}
{{- if .master }}{{- $_ := set $conf "master" .master -}}{{- end }}
{{- if .resourceName }}{{- $_ := set $conf "capabilities" (dict "CNIDeviceInfoFile" true) -}}{{- end }}
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: {{ .name }}
  namespace: {{ .root.Values.nads.namespace }}
  labels:
    {{- include "roce-ipvlan.labels" .root | nindent 4 }}
  {{- if .resourceName }}
  annotations:
    k8s.v1.cni.cncf.io/resourceName: {{ .resourceName }}
  {{- end }}
spec:
  config: {{ toJson $conf | quote }}
{{- end -}}
