# The seed's OpenTofu module: Sutra's chart, installed with the fleet's shape as variables.
resource "helm_release" "sutra" {
  name             = var.name
  namespace        = var.namespace
  create_namespace = true
  chart            = "${path.module}/../../helm/sutra"

  values = [yamlencode({
    image    = { repository = var.image.repository, tag = var.image.tag }
    replicas = var.replicas.min
    database = { existingSecret = var.database_secret }
    auth     = { existingSecret = var.tokens_secret }
    keda = {
      enabled                 = var.keda
      minReplicas             = var.replicas.min
      maxReplicas             = var.replicas.max
      targetBacklogPerReplica = tostring(var.target_backlog_per_replica)
    }
  })]
}
