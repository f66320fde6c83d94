{{/*
The labels Helm's charts put on every object, on top of the bundles' own:
they name the release that owns it.
*/}}
{{- define "cle.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
The image the Pods run: repository:tag, and @digest when one is set, which is
then what runs (the release bundles name their image the same way).
*/}}
{{- define "cle.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref -}}
{{- end }}

{{/*
The ServiceAccount cle-controller runs as, created by the chart unless
serviceAccount.create is false.
*/}}
{{- define "cle.serviceAccountName" -}}
{{- .Values.serviceAccount.name -}}
{{- end }}

{{/*
Whether the LeaseCandidate CRD is rendered: in portable mode, and in auto
mode, which falls back to portable.
*/}}
{{- define "cle.crd" -}}
{{- if and .Values.crds.enabled (ne .Values.apiMode "native") }}true{{ end -}}
{{- end }}

{{/*
The runbooks page of the alerts and the dashboard; by default the chart's
release of docs/operations.md.
*/}}
{{- define "cle.runbookBaseURL" -}}
{{- .Values.monitoring.runbookBaseURL | default (printf "https://github.com/cle-dev/cle/blob/%s/docs/operations.md" .Chart.AppVersion) -}}
{{- end }}

{{/*
The runbooks page the files of manifests/monitoring name, which
cle.runbookBaseURL replaces.
*/}}
{{- define "cle.shippedRunbookBaseURL" -}}
https://github.com/cle-dev/cle/blob/main/docs/operations.md
{{- end }}

{{/*
A file of files/, a copy of the manifests/ file at the same path, with the
runbooks page replaced when it names one, as YAML objects: each given the
release's labels, any of "labels" and "annotations", and the release's
namespace when "namespaced". A file whose content does not parse fails the
render.

  include "cle.objects" (dict "ctx" $ "file" "files/x.yaml" "namespaced" true "labels" (dict ...))
*/}}
{{- define "cle.objects" -}}
{{- $ctx := .ctx -}}
{{- $content := $ctx.Files.Get .file -}}
{{- if not $content }}{{ fail (printf "the chart has no %s" .file) }}{{ end -}}
{{- $content = $content | replace (include "cle.shippedRunbookBaseURL" $ctx) (include "cle.runbookBaseURL" $ctx) -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $content -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" $.file $obj.Error) }}{{ end }}
{{- if $obj }}
{{- $labels := merge (dict) ($.labels | default dict) (include "cle.labels" $ctx | fromYaml) ($obj.metadata.labels | default dict) }}
{{- $_ := set $obj.metadata "labels" $labels }}
{{- with $.annotations }}{{ $_ := set $obj.metadata "annotations" (merge (dict) . ($obj.metadata.annotations | default dict)) }}{{ end }}
{{- if $.namespaced }}{{ $_ := set $obj.metadata "namespace" $ctx.Release.Namespace }}{{ end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Secret holding the metrics endpoint's certificate: metricsTLS.secretName,
or cle-controller-metrics-tls when a cert-manager issuer keeps it; empty when
each replica signs its own.
*/}}
{{- define "cle.metricsTLSSecret" -}}
{{- with .Values.metricsTLS -}}
{{- if .secretName -}}
{{- .secretName -}}
{{- else if .certManager.issuerRef.name -}}
cle-controller-metrics-tls
{{- end -}}
{{- end -}}
{{- end }}
