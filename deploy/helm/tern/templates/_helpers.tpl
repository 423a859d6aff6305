{{/* tern's image reference: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "tern.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* --metrics-address: host:port, an IPv6 host in brackets. */}}
{{- define "tern.metricsAddress" -}}
{{- if contains ":" .Values.metrics.address -}}
[{{ .Values.metrics.address }}]:{{ .Values.metrics.port }}
{{- else -}}
{{ .Values.metrics.address }}:{{ .Values.metrics.port }}
{{- end }}
{{- end }}

{{/* `, "--reference-plugins", "LIST"` for the install when a reference plugin is disabled
(the install's default is portmap,bandwidth). */}}
{{- define "tern.referencePluginsFlag" -}}
{{- $on := list }}
{{- if .Values.referencePlugins.portmap.enabled }}{{ $on = append $on "portmap" }}{{ end }}
{{- if .Values.referencePlugins.bandwidth.enabled }}{{ $on = append $on "bandwidth" }}{{ end }}
{{- if ne (len $on) 2 -}}
, "--reference-plugins", {{ join "," $on | quote }}
{{- end }}
{{- end }}
