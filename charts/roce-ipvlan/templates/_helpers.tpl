{{/* Every object's metadata labels (and the pod template's). Never a selector: the
     DaemonSet's and the Service's select by name and component alone (daemonset.yaml). */}}
{{- define "roce-ipvlan.labels" -}}
app.kubernetes.io/name: roce-ipvlan
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimAll "-._" | quote }}
app.kubernetes.io/part-of: roce-ipvlan
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The installer's image: repository:tag, or repository:tag@digest with image.digest (the
     runtime pulls by the digest; the tag stays for the reader and for the version label). */}}
{{- define "roce-ipvlan.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{/* The installer's namespace. */}}
{{- define "roce-ipvlan.namespace" -}}
{{ .Values.namespace.name | default .Release.Namespace }}
{{- end -}}

{{/* Multus's binDir on the nodes: cniBinDir, else OpenShift's or the usual one. */}}
{{- define "roce-ipvlan.cniBinDir" -}}
{{- if .Values.cniBinDir -}}
{{ .Values.cniBinDir }}
{{- else if .Values.openshift.enabled -}}
/var/lib/cni/bin
{{- else -}}
/opt/cni/bin
{{- end -}}
{{- end -}}

{{/* The NADs' ipam: nv-ipam with the pool they use (poolType and poolName filled in), or the
     ipam object as given. */}}
{{- define "roce-ipvlan.ipam" -}}
{{- $ipam := deepCopy .Values.nads.ipam -}}
{{- if eq (get $ipam "type") "nv-ipam" -}}
{{- $type := get $ipam "poolType" | default (ternary "cidrpool" "ippool" (and .Values.cidrPool.enabled (not .Values.ipPool.enabled))) | lower -}}
{{- if not (has $type (list "ippool" "cidrpool")) -}}
{{- fail (printf "nads.ipam.poolType %q: expected ippool or cidrpool" $type) -}}
{{- end -}}
{{- $_ := set $ipam "poolType" $type -}}
{{- if not (get $ipam "poolName") -}}
{{- $_ := set $ipam "poolName" (ternary .Values.cidrPool.name .Values.ipPool.name (eq $type "cidrpool")) -}}
{{- end -}}
{{- else -}}
{{- /* Helm merges the values' ipam with the defaults: drop nv-ipam's keys left empty. */ -}}
{{- range $key := list "poolType" "poolName" -}}
{{- if not (get $ipam $key) }}{{- $_ := unset $ipam $key -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $ipam -}}
{{- end -}}

{{/* A roce-ipvlan NAD: dict "name" "master" (optional) "resourceName" (optional) "root" $ */}}
{{- define "roce-ipvlan.nad" -}}
{{- $conf := dict "cniVersion" "1.0.0" "name" .name "type" "roce-ipvlan" "ipam" (include "roce-ipvlan.ipam" .root | fromJson) -}}
{{- if .master }}{{- $_ := set $conf "master" .master -}}{{- end }}
{{- if .resourceName }}{{- $_ := set $conf "capabilities" (dict "CNIDeviceInfoFile" true) -}}{{- end }}
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: {{ .name }}
  namespace: {{ .root.Values.nads.namespace | default .root.Release.Namespace }}
  labels:
    {{- include "roce-ipvlan.labels" .root | nindent 4 }}
  {{- if .resourceName }}
  annotations:
    k8s.v1.cni.cncf.io/resourceName: {{ .resourceName }}
  {{- end }}
spec:
  config: {{ toJson $conf | quote }}
{{- end -}}

{{/* The pools' node selector (poolNodeSelector). */}}
{{- define "roce-ipvlan.poolNodeSelector" -}}
nodeSelector:
  nodeSelectorTerms:
    - matchExpressions:
        {{- range $k, $v := .Values.poolNodeSelector }}
        - key: {{ $k }}
          operator: In
          values: [{{ $v | quote }}]
        {{- end }}
{{- end -}}
