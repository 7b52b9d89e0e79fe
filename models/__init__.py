"""Model families behind one small interface (:class:`models.backbone.Backbone`)."""
