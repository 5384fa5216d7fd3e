SELECT c.user_id, a.campaign AS campaign_name
FROM clicks AS c
LEFT JOIN ads AS a ON c.ad_id = a.ad_id AND a.campaign <> 'house'
